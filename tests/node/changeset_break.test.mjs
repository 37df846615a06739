// changeset_break.test.mjs — attacks on a supervised writable command's changeset, through the
// real stack (socket.io-client agent → jailboxd → worker → the session's spawner inside gVisor
// + Docker, on an overlay of the workspace). The agent's command leaves, in one changeset:
// - a link whose text stays inside the workspace when read lexically but leads out once the
//   kernel resolves it ("y" -> ".", "x" -> "y/y/y/../../../outside": every "y" is the root, so
//   the three ".." climb above it);
// - a link at a folder the path rules cover (".husky" -> "evil", whose "_/pre-commit" git then
//   runs as a hook): a link is judged as a directory, as the command rules judge it;
// - the deletion of a git hook (".githooks/pre-push"), which the file tools' delete refuses;
// - a new content for the target of a covered link the pre-scan found
//   (".git/hooks/pre-commit -> ../../scripts/hook.sh": writing scripts/hook.sh writes the hook).
// - git's data written by hand (.git/HEAD, a ref): the file tools never write in a .git folder;
// - a name with a line break (the decision's approvedSha256 takes the approved paths one a
//   line, so approving "a\nb" and "c" would read as approving "a" and "b\nc").
// Each must be listed but not approvable, and approving everything must land none of them.
// The buyer's changeset view and decision are refused to the agent's token and socket, to no
// token, and to another session's buyer.
// The session's pre-image budget (JAILBOX_PREIMAGE_MAX_BYTES) bounds what a changeset keeps:
// one whose old contents pass it is refused when it is built (every deleted file was stored,
// unbounded), and an apply that would pass it applies nothing (the rows read back for the
// apply kept no size: every apply counted 0).
// Needs root, Docker with runsc; the image gets /bin/sh and the coreutils the command uses.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:changeset-break';
const TOOLS = ['rm', 'mkdir', 'ln', 'printf'];

let K, srv, first;
const api = (S, suffix) => `/v1/jailbox/${S.jobId}${suffix}`;

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none', JAILBOX_PREIMAGE_MAX_BYTES: '40960' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, ...TOOLS.map((t) => `/usr/bin/${t}`)]);
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

async function opDone(S, opId) {
  return K.waitFor(`op ${opId} done`, async () => {
    const r = await srv.req('GET', api(S, '/ops?limit=200'), { token: srv.serviceToken });
    const o = r.json.ops.find((x) => x.opId === opId);
    return o && ['done', 'failed'].includes(o.state) ? o : null;
  }, 60000);
}

test('a changeset\'s links out, covered links, covered deletions and covered-link targets are held back', { timeout: 300000 }, async () => {
  const S = await K.openSession((d) => {
    mkdirSync(join(d, 'scripts'));
    writeFileSync(join(d, 'scripts/hook.sh'), '#!/bin/sh\necho checked\n');
    mkdirSync(join(d, '.git/hooks'), { recursive: true });
    symlinkSync('../../scripts/hook.sh', join(d, '.git/hooks/pre-commit'));
    writeFileSync(join(d, '.git/HEAD'), 'ref: refs/heads/main\n');
    mkdirSync(join(d, '.githooks'));
    writeFileSync(join(d, '.githooks/pre-push'), '#!/bin/sh\necho guard\n');
    mkdirSync(join(d, 'd/sub'), { recursive: true });
    writeFileSync(join(d, 'd/sub/f'), 'old\n');
  }, { mode: 'supervised' });
  S.buyer = await K.connect(S.buyerToken);
  S.agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const command = 'ln -s . y && ln -s y/y/y/../../../outside x && mkdir -p evil/_ && ' +
    'printf "#!/bin/sh\\necho hacked\\n" > evil/_/pre-commit && ln -s evil .husky && ' +
    'rm .githooks/pre-push && printf "#!/bin/sh\\necho hacked\\n" > scripts/hook.sh && ' +
    'printf "fine\\n" > ok.txt && printf "n\\n" > "$(printf "a\\nb")" && printf "n\\n" > c && ' +
    'rm -r d && mkdir -p d/sub && printf "g\\n" > d/sub/g && ' +
    'printf "ref: refs/heads/evil\\n" > .git/HEAD && mkdir -p .git/refs/heads && printf "%040d\\n" 1 > .git/refs/heads/evil';
  const call = K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 120 }, 180000);
  const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === command, 60000);
  const ack = await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  // the command's changes wait for the buyer (the agent's call answers once they are decided)
  const req = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.execOpId === ask.opId, 120000);
  const cs = { opId: req.opId };

  // the agent's token and no token read and decide nothing
  const view = `/ops/${cs.opId}/changeset`;
  for (const token of [S.agentToken, undefined]) {
    const g = await srv.req('GET', api(S, view), { token });
    assert.ok([401, 403].includes(g.status), `GET changeset with ${token ? 'the agent\'s' : 'no'} token: ${g.status} ${g.text}`);
    const a = await srv.req('POST', api(S, `/approve/${cs.opId}`), { token, body: { files: ['ok.txt'] } });
    assert.ok([401, 403].includes(a.status), `approve with ${token ? 'the agent\'s' : 'no'} token: ${a.status} ${a.text}`);
  }

  for (const ev of ['jailbox:changeset', 'jailbox:approve']) {
    const a = await S.agent.timeout(10000).emitWithAck(ev, { opId: cs.opId });
    assert.equal(a?.error?.code, 'forbidden', `${ev} with the agent's socket: ${JSON.stringify(a)}`);
  }
  first = { S, opId: cs.opId };
  const page = await srv.req('GET', api(S, `${view}?limit=1000`), { token: S.buyerToken });
  assert.equal(page.status, 200, page.text);
  const by = Object.fromEntries(page.json.files.map((f) => [f.path, f]));
  const rows = JSON.stringify(page.json.files.map((f) => [f.path, f.change, f.approvable, f.why]));
  assert.equal(by.x?.newTarget, 'y/y/y/../../../outside', rows);
  assert.equal(by.x.approvable, false, `a link that resolves out is approvable: ${rows}`);
  assert.equal(by['.husky']?.approvable, false, `a link at a covered folder is approvable: ${rows}`);
  assert.equal(by['.githooks/pre-push']?.change, 'deleted', rows);
  assert.equal(by['.githooks/pre-push'].approvable, false, `a git hook's deletion is approvable: ${rows}`);
  assert.equal(by['scripts/hook.sh']?.change, 'modified', rows);
  assert.equal(by['scripts/hook.sh'].approvable, false, `a covered link's target is approvable: ${rows}`);
  assert.equal(by['ok.txt']?.approvable, true, rows);
  assert.equal(by['.git/HEAD']?.approvable, false, `git's HEAD is approvable: ${rows}`);
  assert.equal(by['.git/refs/heads/evil']?.approvable, false, `a ref made by hand is approvable: ${rows}`);
  assert.equal(by.y?.approvable, true, rows);
  // a name with a line break: approving "a\nb" and "c" would hash as approving "a" and "b\nc"
  assert.equal(by['a\nb']?.approvable, false, `a name with a line break is approvable: ${rows}`);
  assert.equal(by.c?.approvable, true, rows);
  // a folder made again where one was removed is opaque: nothing of the old one shows below it,
  // not even under a folder made again inside it (d/sub/f is gone in the command's view)
  assert.equal(by['d/sub/f']?.change, 'deleted', `d/sub/f's deletion is missing: ${rows}`);

  // approving everything lands only what could be approved
  const ok = await srv.req('POST', api(S, `/approve/${cs.opId}`), { token: S.buyerToken, body: {} });
  assert.equal(ok.status, 200, ok.text);
  const op = await opDone(S, cs.opId);
  assert.equal(op.state, 'done', JSON.stringify(op));
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 600));
  assert.equal(r.result.structuredContent.exitCode, 0, JSON.stringify(r.result.structuredContent).slice(0, 400));
  assert.equal(r.result.structuredContent.changeset.state, 'applied');
  assert.equal(readFileSync(join(S.dir, 'ok.txt'), 'utf8'), 'fine\n');
  assert.equal(readlinkSync(join(S.dir, 'y')), '.');
  for (const p of ['x', '.husky', 'a\nb', '.git/refs'])
    assert.throws(() => lstatSync(join(S.dir, p)), /ENOENT/, `${p} landed`);
  assert.equal(readFileSync(join(S.dir, '.githooks/pre-push'), 'utf8'), '#!/bin/sh\necho guard\n');
  assert.equal(readFileSync(join(S.dir, 'scripts/hook.sh'), 'utf8'), '#!/bin/sh\necho checked\n');
  assert.deepEqual(readdirSync(join(S.dir, 'd/sub')), ['g'], 'd/sub is not what the command left');
  assert.equal(readFileSync(join(S.dir, '.git/HEAD'), 'utf8'), 'ref: refs/heads/main\n');
  S.agent.close();
  S.buyer.close();
});

// Runs `command` writable as S's agent, the command line approved by S's buyer: the call
// (which answers once its changes are decided, or at once when they were refused) and the
// changeset's approval request, or null when none came before the call answered.
async function runWritable(S, command) {
  const call = K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 120 }, 180000);
  const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === command, 60000);
  assert.equal((await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId })).ok, true);
  let answered = false;
  call.then(() => { answered = true; }, () => { answered = true; });
  const req = await K.waitFor('the changeset or the answer', () =>
    S.buyer.events.find((e) => e.event === 'jailbox:approval_request' && e.payload.tool === 'changeset' && e.payload.execOpId === ask.opId)?.payload ??
    (answered ? 'answered' : null), 120000);
  return { call, req: req === 'answered' ? null : req };
}

async function answer(call) {
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r).slice(0, 600));
  return r.result.structuredContent;
}

test('the pre-image budget: a changeset whose old contents pass it is refused; two that fit only apart, the second applies nothing', { timeout: 300000 }, async () => {
  // (two contents apart: the store keeps one blob of equal contents)
  const big = 'x'.repeat(65536) + '\n', mid = 'm'.repeat(10000) + '\n', mid2 = 'n'.repeat(10000) + '\n';
  const S = await K.openSession((d) => {
    writeFileSync(join(d, 'big.txt'), big);
    writeFileSync(join(d, 'a.txt'), mid);
    writeFileSync(join(d, 'b.txt'), mid2);
  }, { mode: 'supervised' });
  S.buyer = await K.connect(S.buyerToken);
  S.agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  // 64 KiB kept for rollback would pass JAILBOX_PREIMAGE_MAX_BYTES (32 KiB): refused at once,
  // nothing stored (a command deleting a whole tree stored every file of it, unbounded)
  const { call } = await runWritable(S, 'rm big.txt');
  const res = await answer(call);
  assert.equal(res.changeset?.state, 'refused', `a changeset past the budget: ${JSON.stringify(res.changeset)}`);
  assert.equal(res.changeset.code, 'preimage_budget', JSON.stringify(res.changeset));
  assert.equal(readFileSync(join(S.dir, 'big.txt'), 'utf8'), big);
  // another session's buyer reads and decides nothing of the first session's changeset
  if (first) {
    const g = await srv.req('GET', api(first.S, `/ops/${first.opId}/changeset`), { token: S.buyerToken });
    assert.ok([401, 403].includes(g.status), `another session's buyer: ${g.status} ${g.text}`);
    const o = await srv.req('GET', api(S, `/ops/${first.opId}/changeset`), { token: S.buyerToken });
    assert.ok(o.status === 404 || (o.status === 200 && o.json.opId !== first.opId), `another session's op: ${o.status} ${o.text}`);
    const a = await srv.req('POST', api(S, `/approve/${first.opId}`), { token: S.buyerToken, body: {} });
    assert.ok([404, 409].includes(a.status), `another session's op approved: ${a.status} ${a.text}`);
  }
  // 12 KiB blocks each side (the budget counts what the store keeps: the new contents from the
  // build, the old ones at the apply): both changesets fit while neither is applied (3 × 12
  // KiB of 40), applying both would keep 48 KiB
  const c1 = await runWritable(S, 'printf "more\\n" >> a.txt');
  const c2 = await runWritable(S, 'printf "more\\n" >> b.txt');
  assert.ok(c1.req && c2.req, 'both changesets pending');
  for (const c of [c1, c2])
    assert.equal((await srv.req('POST', api(S, `/approve/${c.req.opId}`), { token: S.buyerToken, body: {} })).status, 200);
  const one = await answer(c1.call), two = await answer(c2.call);
  assert.equal(one.changeset.state, 'applied', JSON.stringify(one.changeset));
  assert.equal(two.changeset.state, 'failed', `applied past the pre-image budget: ${JSON.stringify(two.changeset)}`);
  assert.equal(two.changeset.error?.code, 'preimage_budget', JSON.stringify(two.changeset));
  assert.equal(readFileSync(join(S.dir, 'a.txt'), 'utf8'), mid + 'more\n');
  assert.equal(readFileSync(join(S.dir, 'b.txt'), 'utf8'), mid2);
  S.agent.close();
  S.buyer.close();
});
