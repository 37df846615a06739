// http_hardening.test.mjs — the faults a review found in the HTTP front, each held to the
// right answer with raw bytes over TCP: framing and smuggling shapes, transfer codings,
// Host, encoded path bytes, bodies before auth, per-address limits, bad ids, whitespace.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from './lib/server.mjs';

let srv, port, s;
before(async () => {
  srv = await startServer({ JAILBOX_HTTP_CONNS_PER_IP: '40', JAILBOX_HTTP_BODY_BUDGET: '3000000' });
  port = Number(new URL(srv.url).port);
  s = await srv.open({ jobId: 'victim' });
  await srv.setState('victim', 'active');
});
after(async () => { await srv.stop(); });

// sends raw bytes — the head (through the blank line ending the headers) first, the rest
// 150 ms later, so that an early refusal is read before more bytes reach a closed socket —
// and resolves with everything received until close or `ms`
function raw(bytes, ms = 1500) {
  const cut = bytes.indexOf('\r\n\r\n');
  const head = cut < 0 ? bytes : bytes.slice(0, cut + 4);
  const rest = cut < 0 ? '' : bytes.slice(cut + 4);
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let got = '';
    const t = setTimeout(() => { sock.destroy(); resolve({ got, closed: false }); }, ms);
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('error', () => {});
    sock.on('close', () => { clearTimeout(t); resolve({ got, closed: true }); });
    sock.write(head);
    if (rest) setTimeout(() => { if (!sock.destroyed) sock.write(rest); }, 150);
  });
}
const statuses = (got) => [...got.matchAll(/^HTTP\/1\.[01] (\d{3})/gm)].map((m) => Number(m[1]));
const state = async () => (await srv.db.query("SELECT state FROM sessions WHERE job_id = 'victim'")).rows[0].state;
const auth = () => `Authorization: Bearer ${s.buyerToken}\r\n`;

test('smuggling shapes: a header name that is not a token is refused and nothing behind it runs', async () => {
  const smuggled = `POST /v1/jailbox/victim/pause HTTP/1.1\r\nHost: x\r\n${auth()}Content-Length: 0\r\n\r\n`;
  for (const head of [`Content-Length : ${smuggled.length}`, `Transfer-Encoding : chunked\r\nContent-Length: 4`,
                      `X: y\r\n Content-Length: ${smuggled.length}`, `Content-Length2: ${smuggled.length}`,
                      `Content-Length\t: ${smuggled.length}`]) {
    const r = await raw(`GET /v1/jailbox/victim HTTP/1.1\r\nHost: x\r\n${auth()}${head}\r\n\r\n${smuggled}`);
    assert.deepEqual(statuses(r.got), [400], head);
    assert.equal(await state(), 'active', head);
  }
});

test('transfer codings other than chunked get 501 and the connection closes; HTTP/1.0 with TE 400', async () => {
  for (const te of ['identity', 'gzip', 'xchunked', 'chunked, identity', 'identity, chunked', '']) {
    const r = await raw(`POST /v1/jailbox/victim/pause HTTP/1.1\r\nHost: x\r\n${auth()}Transfer-Encoding: ${te}\r\n\r\n0\r\n\r\n`);
    assert.deepEqual(statuses(r.got), [501], `TE '${te}'`);
    assert.equal(r.closed, true);
  }
  let r = await raw(`POST /v1/jailbox/victim/pause HTTP/1.0\r\n${auth()}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [400]);
  // only the exact spelling frames a body; "chunked " would be read as no body, so it is refused
  r = await raw(`POST /v1/jailbox/victim/pause HTTP/1.1\r\nHost: x\r\n${auth()}Transfer-Encoding: chunked \r\n\r\n0\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [501]);
  r = await raw(`POST /v1/jailbox/victim/pause HTTP/1.1\r\nHost: x\r\n${auth()}Transfer-Encoding: CHUNKED\r\nConnection: close\r\n\r\n0\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [200]);
  assert.equal(await state(), 'paused');
  await srv.setState('victim', 'active');
});

test('Host: missing on HTTP/1.1 or repeated is 400; repeated Authorization is 400', async () => {
  let r = await raw(`GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [400]);
  r = await raw(`GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [400]);
  r = await raw(`GET /healthz HTTP/1.0\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [200]);
  const other = await srv.open();
  r = await raw(`GET /v1/jailbox/victim HTTP/1.1\r\nHost: x\r\n${auth()}Authorization: Bearer ${other.buyerToken}\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [400]);
});

test('paths with encoded slash, backslash or control bytes are refused before routing', async () => {
  for (const p of ['/v1/jailbox/victim%2fpause', '/v1/jailbox/victim%2Fpause', '/v1/jailbox/victim%00/pause',
                   '/v1/jailbox/victim%5cpause', '/v1/jailbox/victim%0a', '/v1/jailbox/victim%7f', '/v1/jailbox/victim%zz']) {
    const r = await raw(`POST ${p} HTTP/1.1\r\nHost: x\r\n${auth()}Content-Length: 0\r\nConnection: close\r\n\r\n`);
    assert.deepEqual(statuses(r.got), [400], p);
  }
  const r = await raw(`POST /v1/jailbox/victim/approve/3%00 HTTP/1.1\r\nHost: x\r\n${auth()}Content-Length: 0\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [400]);
  assert.equal(await state(), 'active');
  // a plain percent-encoded letter is still fine
  const ok = await srv.req('GET', '/v1/jailbox/vict%69m', { token: s.buyerToken });
  assert.equal(ok.status, 200);
});

test('ids that cannot exist are 404 (never a database error): bad UTF-8, odd characters', async () => {
  for (const p of ['/v1/jailbox/%ff', '/v1/jailbox/%c0%af/ops', '/v1/jailbox/..', '/v1/jailbox/a%20b']) {
    const r = await srv.req('GET', p, { token: srv.serviceToken });
    assert.equal(r.status, 404, p);
  }
  for (const p of ['/v1/agents/a%ffb', '/v1/agents/%e2%80%ae', '/v1/agents/..']) {
    const r = await srv.req('GET', p, { token: srv.serviceToken });
    assert.equal(r.status, 404, p);
  }
  for (const agentId of ['a\u0085b', 'evil\u202eexe', '.', '..', 'org/agent', 'a b']) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken, body: { agentId, workspace: 'aid' } });
    assert.equal(r.status, 400, JSON.stringify(agentId));
  }
  assert.ok(!/database error/.test(srv.log()), 'no database error was logged');
});

test('bodies are not buffered for an API request without a well-formed token', async () => {
  const body = '{"agentId":"a","workspace":"w"}';
  let r = await raw(`POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  assert.deepEqual(statuses(r.got), [401]);
  assert.equal(r.closed, true);
  r = await raw(`POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nTransfer-Encoding: chunked\r\n\r\n`);
  assert.deepEqual(statuses(r.got), [401]);
});

test('the memory held by bodies in flight is bounded: one address gets a quarter of the budget', async () => {
  // budget 3,000,000 bytes: one client address may hold 750,000. Four clients announce
  // 200 KiB each and send 190 KiB: three fit, the fourth is refused. A refused body's rest is
  // read and dropped (MHD takes no response in the middle of a body), then it is answered 503
  // busy; the three accepted ones are read whole (then refused: opening is the service's).
  const socks = [];
  for (let i = 0; i < 4; i++) {
    const sock = net.connect(port, '127.0.0.1');
    sock.got = '';
    sock.on('data', (d) => { sock.got += d.toString('latin1'); });
    sock.on('error', () => {});
    sock.write(`POST /v1/jailbox HTTP/1.1\r\nHost: x\r\n${auth()}Content-Length: 204800\r\n\r\n`);
    sock.write('x'.repeat(190 * 1024));
    socks.push(sock);
    await new Promise((r) => setTimeout(r, 150));
  }
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(socks.map((x) => x.got), ['', '', '', ''], 'nothing is answered before the bodies end');
  for (const x of socks) x.write('x'.repeat(10 * 1024));
  const t0 = Date.now();
  while (socks.some((x) => !/\r\n\r\n\{.*\}$/s.test(x.got)) && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 50));
  for (const x of socks) x.destroy();
  assert.deepEqual(socks.map((x) => statuses(x.got)[0]), [403, 403, 403, 503], 'the fourth body is past the share');
  assert.match(socks[3].got, /"code":"busy"/);
  assert.match(socks[3].got, /Connection: close/i);
  await new Promise((r) => setTimeout(r, 300));
  const ok = await srv.req('GET', '/v1/jailbox/victim', { token: s.buyerToken });
  assert.equal(ok.status, 200);
  // and once they are gone the share is free again: a body of the same size goes through
  const again = await srv.req('PATCH', '/v1/jailbox/victim', { token: s.buyerToken,
    raw: JSON.stringify({ mode: 'supervised', pad: 'x'.repeat(190 * 1024) }) });
  assert.equal(again.status, 400); // read whole, then refused for its unknown field
  assert.match(again.json.error.message, /unknown field 'pad'/);
});

test('one address cannot hold every connection', async () => {
  const socks = [];
  for (let i = 0; i < 60; i++) {
    const sock = net.connect(port, '127.0.0.1');
    sock.on('error', () => {});
    sock.write('GET /healthz HTTP/1.1\r\nHo'); // never finishes its headers
    socks.push(sock);
  }
  await new Promise((r) => setTimeout(r, 300));
  const closed = socks.filter((x) => x.destroyed || x.readyState !== 'open').length;
  assert.ok(closed >= 20, `connections past the per-address limit are dropped (${closed} of 60)`);
  for (const x of socks) x.destroy();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal((await srv.req('GET', '/healthz')).status, 200);
});

test('whitespace around the bearer token is not part of it', async () => {
  for (const h of [`Bearer ${s.buyerToken} `, `Bearer  ${s.buyerToken}\t`, `bearer ${s.buyerToken}`]) {
    const r = await srv.req('GET', '/v1/jailbox/victim', { headers: { authorization: h } });
    assert.equal(r.status, 200, JSON.stringify(h));
  }
});

test('limits keep their precision; the request log keeps its fields for odd paths', async () => {
  const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
    body: { agentId: 'a', workspace: 'prec', limits: { cpus: 63.9999999 } } });
  // the workspace does not exist: still validated first
  assert.equal(r.status, 400);
  const o = await srv.open({ workspace: 'prec2', limits: { cpus: 63.9999999 } });
  const g = await srv.req('GET', `/v1/jailbox/${o.jobId}`, { token: srv.serviceToken });
  assert.equal(g.json.limits.cpus, 63.9999999);
});

test('a hung change listener cannot keep a revoked token working: bounded by the heartbeat and TTL', async () => {
  const o = await srv.open({ jobId: 'hung-1' });
  const get = () => srv.req('GET', '/v1/jailbox/hung-1', { token: o.buyerToken });
  assert.equal((await get()).status, 200);
  assert.equal((await get()).status, 200); // cached
  const pid = (await srv.db.query(
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'jailboxd-listen'")).rows[0].pid;
  process.kill(pid, 'SIGSTOP');
  try {
    await srv.db.query("UPDATE tokens SET revoked_at = now() WHERE job_id = 'hung-1'");
    const t0 = Date.now();
    let status = 200;
    while (Date.now() - t0 < 6000 && status === 200) {
      status = (await get()).status;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(status, 401, 'revocation seen');
    assert.ok(Date.now() - t0 < 4500, `within the bound (${Date.now() - t0} ms)`);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
});

test('a request whose token check and handler wait on the database longer than the body deadline still gets its answer', async () => {
  // its own server with a 1 s idle timeout (a body must arrive within 2 s); the open's token
  // check and insert wait on a table lock held for 3 s: that wait is the server's, not the
  // client's, and must not count against the body's deadline
  const own = await startServer({ JAILBOX_HTTP_TIMEOUT: '1', JAILBOX_LOG_LEVEL: 'debug' });
  try {
    const c = await own.db.connect();
    try {
      await c.query('BEGIN');
      await c.query('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE');
      const t0 = Date.now();
      mkdirSync(join(own.wsroot, 'slow'));
      const pending = own.req('POST', '/v1/jailbox', { token: own.serviceToken, body: { workspace: 'slow', agentId: 'agent-1' } })
        .catch((e) => ({ error: e.message }));
      await new Promise((res) => setTimeout(res, 3000));
      await c.query('COMMIT');
      const r = await pending;
      assert.ok(!r.error, `the answer was lost: ${r.error}\n${own.log().split('\n').filter((l) => /http|request|warn|error/.test(l)).join('\n')}`);
      assert.equal(r.status, 201, r.text);
      assert.ok(Date.now() - t0 >= 3000);
    } finally { c.release(); }
    // an idle connection is still closed after the timeout
    const port2 = Number(new URL(own.url).port);
    const closedAfter = await new Promise((resolve) => {
      const t0 = Date.now();
      const sock = net.connect(port2, '127.0.0.1');
      sock.on('error', () => {});
      sock.on('close', () => resolve(Date.now() - t0));
      setTimeout(() => { sock.destroy(); resolve(null); }, 6000);
    });
    assert.ok(closedAfter !== null && closedAfter < 5000, `idle connection closed after ${closedAfter} ms`);
  } finally { await own.stop(); }
});

test('a body being dropped (over the budget, or over the size limit) keeps the body deadline: trickling it cannot hold the connection', async () => {
  // its own server: 1 s idle timeout (a body must arrive within 2 s), a budget of 4096 bytes
  // (one address: 1024) and bodies of at most 2048. One body is refused for the budget (2000
  // declared), one for its size (chunked, 3000 bytes); both are then trickled a byte every
  // 600 ms, which the idle timeout alone never ends: the deadline must close them.
  const own = await startServer({ JAILBOX_HTTP_TIMEOUT: '1', JAILBOX_HTTP_BODY_BUDGET: '4096',
                                  JAILBOX_MAX_BODY_BYTES: '2048' });
  try {
    const port2 = Number(new URL(own.url).port);
    const trickle = (head, first, piece) => new Promise((resolve) => {
      const t0 = Date.now();
      const sock = net.connect(port2, '127.0.0.1');
      let got = '', timer = null;
      const done = (closedAfter) => { clearInterval(timer); sock.destroy(); resolve({ closedAfter, got }); };
      sock.on('data', (d) => { got += d.toString('latin1'); });
      sock.on('error', () => {});
      sock.on('close', () => done(Date.now() - t0));
      sock.write(head);
      setTimeout(() => { if (!sock.destroyed) sock.write(first); }, 100);
      timer = setInterval(() => { if (!sock.destroyed) sock.write(piece); }, 600);
      setTimeout(() => done(null), 9000);
    });
    const hd = `POST /v1/jailbox HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${own.serviceToken}\r\n`;
    const [busy, big] = await Promise.all([
      trickle(`${hd}Content-Length: 2000\r\n\r\n`, 'x', 'x'),
      trickle(`${hd}Transfer-Encoding: chunked\r\n\r\n`, `bb8\r\n${'x'.repeat(3000)}\r\n`, '1\r\nx\r\n'),
    ]);
    assert.ok(busy.closedAfter !== null && busy.closedAfter < 5000,
      `a body refused for the budget, trickled, was closed after ${busy.closedAfter} ms`);
    assert.ok(big.closedAfter !== null && big.closedAfter < 5000,
      `a body over the size limit, trickled, was closed after ${big.closedAfter} ms`);
    // the budget is whole again: a body that fits is read and answered
    const ok = await own.req('PATCH', '/v1/jailbox/nosuch', { token: own.serviceToken, raw: JSON.stringify({ mode: 'supervised', pad: 'x'.repeat(900) }) });
    assert.notEqual(ok.status, 503, ok.text);
  } finally { await own.stop(); }
});
