// fulldiff.test.mjs — the whole diff of a pending write or edit (GET
// /v1/jailbox/:jobId/ops/:opId/diff) when the approval request's preview is cut: with
// JAILBOX_DIFF_PREVIEW_MAX at 1 KiB, a supervised write that changes every line of a
// ~200 KiB file is announced with a truncated preview, and the route gives the whole diff —
// every removed and added line, checked against the file and the content sent — made by
// reading the file through the session's sandbox; the agent's token and another session's
// buyer are refused; an op that is not a write or an edit has no diff; once approved, the
// op's content is gone and the route says so (409 invalid_state). Needs root, Docker with
// runsc. `jailboxctl diff` prints the same text, and exits 1 once the op is decided.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { CTL } from './lib/mcp.mjs';

let K, srv;

before(async () => {
  K = await startSandboxServer('jailbox-sandbox:fulldiff', { JAILBOX_APPROVAL_TIMEOUT: '120', JAILBOX_DIFF_PREVIEW_MAX: '1024' });
  srv = K.srv;
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

const LINES = 4000;
const oldLines = Array.from({ length: LINES }, (_, i) => `old line ${String(i).padStart(5, '0')} ${'o'.repeat(36)}`);
const newLines = Array.from({ length: LINES }, (_, i) => `new line ${String(i).padStart(5, '0')} ${'n'.repeat(36)}`);
const oldText = oldLines.join('\n') + '\n', newText = newLines.join('\n') + '\n';

test('a cut preview, the whole diff on demand, refused to others, gone once decided', { timeout: 240000 }, async () => {
  assert.ok(oldText.length > 190 * 1024 && oldText.length < 1 << 20, String(oldText.length));
  const S = await K.openSession((d) => {
    writeFileSync(join(d, 'big.txt'), oldText);
    writeFileSync(join(d, 'small.txt'), 'a\nb\nc\n');
  });
  const other = await K.openSession(() => {});
  const buyer = await K.connect(S.buyerToken);
  const agent = await K.connect(S.agentToken);
  const url = (op) => `/v1/jailbox/${S.jobId}/ops/${op}/diff`;

  const pending = K.call(agent, 'write', { path: 'big.txt', content: newText }, 180000);
  const req = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'big.txt', 60000);
  assert.equal(req.diff.truncated, true, JSON.stringify(req.diff).slice(0, 300));
  assert.ok(Buffer.byteLength(req.diff.text) <= 1024, String(Buffer.byteLength(req.diff.text)));

  // the whole diff, for the buyer and for the service
  const t0 = Date.now();
  const r = await srv.req('GET', url(req.opId), { token: S.buyerToken });
  const ms = Date.now() - t0;
  assert.equal(r.status, 200, r.text);
  console.log(`whole diff of ${r.json.diff.bytes} bytes in ${ms} ms`);
  assert.equal(r.json.opId, req.opId);
  assert.equal(r.json.path, 'big.txt');
  assert.equal(r.json.tool, 'write');
  assert.equal(r.json.changed, false);
  assert.equal(r.json.exists, true);
  assert.equal(r.json.currentSha256, req.currentSha256);
  const d = r.json.diff;
  assert.equal(d.format, 'unified');
  assert.equal(d.truncated, false);
  assert.equal(d.bytes, Buffer.byteLength(d.text));
  assert.equal(d.bytes, req.diff.bytes, 'the preview names the whole diff\'s length');
  assert.ok(d.text.startsWith(req.diff.text), 'the preview is the whole diff\'s beginning');
  const lines = d.text.split('\n');
  assert.equal(lines.pop(), '', 'ends with a line end');
  assert.ok(lines.includes('--- a/big.txt') && lines.includes('+++ b/big.txt'), lines.slice(0, 4).join('\n'));
  assert.deepEqual(lines.filter((l) => l.startsWith('@@')), [`@@ -1,${LINES} +1,${LINES} @@`]);
  assert.deepEqual(lines.filter((l) => l.startsWith('-') && !l.startsWith('---')).map((l) => l.slice(1)), oldLines);
  assert.deepEqual(lines.filter((l) => l.startsWith('+') && !l.startsWith('+++')).map((l) => l.slice(1)), newLines);
  assert.equal(lines[lines.length - 1], '+' + newLines[LINES - 1]);
  const bySvc = await srv.req('GET', url(req.opId), { token: srv.serviceToken });
  assert.equal(bySvc.status, 200, bySvc.text);
  assert.equal(bySvc.json.diff.text, d.text);

  // jailboxctl diff prints the same text (as it is: stdout is a pipe)
  const ctlEnv = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: S.buyerToken };
  assert.equal(execFileSync(CTL, ['diff', S.jobId, String(req.opId)], { env: ctlEnv, encoding: 'utf8', maxBuffer: 1 << 24 }), d.text);

  // refused: the agent's token, another session's buyer, no such op, a malformed op id
  const byAgent = await srv.req('GET', url(req.opId), { token: S.agentToken });
  assert.equal(byAgent.status, 403, byAgent.text);
  const byOther = await srv.req('GET', url(req.opId), { token: other.buyerToken });
  assert.equal(byOther.status, 403, byOther.text);
  const otherOwn = await srv.req('GET', `/v1/jailbox/${other.jobId}/ops/${req.opId}/diff`, { token: other.buyerToken });
  assert.equal(otherOwn.status, 404, otherOwn.text);
  assert.equal(otherOwn.json.error.code, 'not_found');
  assert.equal((await srv.req('GET', url(999999999), { token: S.buyerToken })).status, 404);
  assert.equal((await srv.req('GET', url('x1'), { token: S.buyerToken })).status, 404);
  assert.equal((await srv.req('GET', url(req.opId))).status, 401);

  // the file was read through the sandbox: a stat op, which has no diff itself
  const ops = (await srv.req('GET', `/v1/jailbox/${S.jobId}/ops`, { token: S.buyerToken })).json.ops;
  const stat = ops.find((o) => o.tool === 'stat' && o.path === 'big.txt');
  assert.ok(stat, JSON.stringify(ops.map((o) => [o.opId, o.tool, o.path])));
  const noDiff = await srv.req('GET', url(stat.opId), { token: S.buyerToken });
  assert.equal(noDiff.status, 409, noDiff.text);
  assert.equal(noDiff.json.error.code, 'no_diff');

  // approved: the content is dropped, the route says why there is no diff now
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.equal(toolFailure(await pending), undefined);
  const gone = await srv.req('GET', url(req.opId), { token: S.buyerToken });
  assert.equal(gone.status, 409, gone.text);
  assert.equal(gone.json.error.code, 'invalid_state');
  assert.equal(gone.json.error.state, 'done');
  assert.match(gone.json.error.message, /no longer kept.*sha256/);
  const ctlGone = spawnSync(CTL, ['diff', S.jobId, String(req.opId)], { env: ctlEnv, encoding: 'utf8' });
  assert.equal(ctlGone.status, 1, ctlGone.stderr);
  assert.match(ctlGone.stderr, /409.*invalid_state.*no longer kept/, ctlGone.stderr);

  // an edit: the whole diff of the write it amounts to
  const pe = K.call(agent, 'edit', { path: 'small.txt', edits: [{ oldText: 'b\n', newText: 'B\n' }] }, 60000);
  const reqE = await K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.path === 'small.txt', 60000);
  const e = await srv.req('GET', url(reqE.opId), { token: S.buyerToken });
  assert.equal(e.status, 200, e.text);
  assert.equal(e.json.tool, 'edit');
  assert.equal(e.json.diff.text.split('\n').filter((l) => /^[-+@ ]/.test(l) && !/^(---|\+\+\+)/.test(l)).join('|'),
    '@@ -1,3 +1,3 @@| a|-b|+B| c');
  assert.equal((await buyer.timeout(10000).emitWithAck('jailbox:reject', { opId: reqE.opId, reason: 'no' })).ok, true);
  assert.ok(toolFailure(await pe));
  const goneE = await srv.req('GET', url(reqE.opId), { token: S.buyerToken });
  assert.equal(goneE.status, 409, goneE.text);
  assert.equal(goneE.json.error.state, 'rejected');
});
