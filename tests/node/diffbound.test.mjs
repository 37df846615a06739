// diffbound.test.mjs — the whole diff of a pending write (GET …/ops/:opId/diff) reads the file
// through the session's sandbox with a stat op, a call that waits (server/pool.h) and takes one
// of the places of such calls (JAILBOX_MAX_WAITING_CALLS), which every session's calls share.
// A buyer whose sandbox does not run the stat (here: no worker at all, so it waits its whole
// OP_RUN_TIMEOUT_MS) must not be able to take every place with a handful of requests: past
// the bound the diff is refused at once (503), and another session's requests keep being
// answered.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './lib/server.mjs';

let srv;
before(async () => { srv = await startServer({ JAILBOX_WS_WORKERS: '4', JAILBOX_MAX_WAITING_CALLS: '3' }); });
after(async () => { await srv.stop(); });

test('diff calls in flight are bounded: they cannot take every waiting place from the other sessions', { timeout: 60000 }, async () => {
  const a = await srv.open(), b = await srv.open();
  for (const s of [a, b]) await srv.setState(s.jobId, 'active');
  const r = await srv.db.query(
    "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'write', 'f.txt', $2, 'pending') RETURNING op_id",
    [a.jobId, JSON.stringify({ content: 'new\n' })]);
  const op = Number(r.rows[0].op_id);
  // eight diff calls at once on a's op: their stats are never run
  const ctl = new AbortController();
  const answered = [];
  const flood = [];
  for (let i = 0; i < 8; i++)
    flood.push(fetch(`${srv.url}/v1/jailbox/${a.jobId}/ops/${op}/diff`,
      { headers: { authorization: `Bearer ${a.buyerToken}` }, signal: ctl.signal })
      .then((x) => { answered.push(x.status); }, () => {}));
  await new Promise((res) => setTimeout(res, 1500));
  // b's buyer still gets answers from the socket's threads: its own diff call (no such op: 404)
  const t0 = Date.now();
  const other = await fetch(`${srv.url}/v1/jailbox/${b.jobId}/ops/999/diff`,
    { headers: { authorization: `Bearer ${b.buyerToken}` }, signal: AbortSignal.timeout(10000) })
    .then(async (x) => ({ status: x.status, text: await x.text() }), (e) => ({ status: 0, text: String(e) }));
  const ms = Date.now() - t0;
  const early = [...answered];
  // a's end ends the diff still waiting for its stat (so that the server stops at once)
  const ab = await srv.req('POST', `/v1/jailbox/${a.jobId}/abort`, { token: a.buyerToken, body: { reason: 'test over' } });
  assert.equal(ab.status, 200, ab.text);
  await Promise.race([Promise.all(flood), new Promise((res) => setTimeout(res, 10000))]);
  ctl.abort();
  await Promise.all(flood);
  assert.equal(answered.length, 8, `the waiting diff was answered once its session ended: ${answered}`);
  assert.equal(other.status, 404, other.text);
  assert.ok(ms < 3000, `another session's call waited ${ms} ms behind the flood`);
  // past the bound (three waiting places, one of them for a whole diff)
  // a diff call is refused at once; the one within it still waits for its stat
  assert.ok(early.length === 7 && early.every((x) => x === 503),
    `answered within 1.5 s: ${early}`);
});
