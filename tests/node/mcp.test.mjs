// mcp.test.mjs — the agent's MCP over its three transports against a real jailboxd with a real
// worker (dockerd + runsc + bwrap): the official SDK client (@modelcontextprotocol/sdk) over
// Streamable HTTP (POST /mcp with the agent token as bearer), over stdio (`jailboxctl
// mcp-bridge`) and over a small SDK Transport on socket.io-client's `mcp` event — initialize,
// tools/list, reads and lists, tool failures as isError results, invalid params as JSON-RPC
// errors; raw HTTP for what the SDK never sends (tokens, Origin, limits, headers, the
// 2026-07-28 stateless requests, older revisions); a supervised write over HTTP that waits for
// the buyer while the HTTP front (one thread) goes on answering; and the MCP conformance suite
// (@modelcontextprotocol/conformance, `server --url` through a loopback proxy that adds the
// agent's bearer token) at 2025-11-25 and 2026-07-28 with conformance-baseline.yml. Needs root
// and Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSandboxServer } from './lib/agent.mjs';
import { CTL, TRANSPORTS, connectClient } from './lib/mcp.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {},
               'io.modelcontextprotocol/clientInfo': { name: 'mcp-test', version: '1' } };
let kit, srv;
const children = [];

before(async () => {
  // one HTTP thread: a call that waits for the buyer must not hold it
  kit = await startSandboxServer('jailbox-sandbox:mcp', { JAILBOX_HTTP_THREADS: '1' });
  srv = kit.srv;
});

let lingering; // a supervised call still waiting for the buyer when the server drains

after(async () => {
  for (const c of children) c.kill('SIGKILL');
  kit?.closeSockets();
  const stopped = await srv?.stop();
  if (lingering) {
    // drained while suspended: the client gets a JSON-RPC error that says so, the server
    // exits cleanly
    const r = await lingering;
    assert.ok([200, 503].includes(r.status), r.text);
    assert.equal(r.json?.error?.data?.reason, 'unavailable', r.text);
    assert.equal(stopped.code, 0, JSON.stringify(stopped));
  }
});

function build(dir) {
  mkdirSync(join(dir, 'src'), { recursive: true });
  mkdirSync(join(dir, 'secrets'), { recursive: true });
  writeFileSync(join(dir, 'src/a.c'), 'int main(void) { return 0; }\n');
  writeFileSync(join(dir, 'README'), 'a tiny C project\n');
  writeFileSync(join(dir, 'secrets/token.txt'), 'hunter2\n');
}

// one JSON-RPC message POSTed to /mcp with the usual headers (each may be overridden or
// dropped with null)
async function post(body, { token, headers = {}, raw } = {}) {
  const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (token) h.authorization = 'Bearer ' + token;
  for (const [k, v] of Object.entries(headers)) {
    if (v === null) delete h[k.toLowerCase()];
    else h[k.toLowerCase()] = v;
  }
  const r = await fetch(srv.url + '/mcp', { method: 'POST', headers: h, body: raw ?? JSON.stringify(body) });
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, json, text, headers: r.headers };
}

// a 2026-07-28 request: _meta in params, the standard headers
function modern(token, id, method, params = {}, headers = {}) {
  const name = params.name ?? params.uri;
  return post({ jsonrpc: '2.0', id, method, params: { ...params, _meta: META } }, { token,
    headers: { 'mcp-protocol-version': MODERN, 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}), ...headers } });
}

for (const kind of TRANSPORTS) {
  test(`the SDK client over ${kind}: initialize, tools/list, read and list, failures as isError, invalid params as JSON-RPC errors`, async () => {
    const S = await kit.openSession(build, { mode: 'unsupervised', exclude: ['secrets'] });
    const client = await connectClient(kind, kit, S, 'jailbox-mcp-test');
    try {
      assert.equal(client.getServerVersion().name, 'jailbox');
      assert.ok(client.getServerCapabilities().tools);
      // the agent's arrival moves the session to active, on every transport
      await kit.waitFor('active', async () => (await kit.sessionOf(S.jobId)).state === 'active', 20000);
      const tools = (await client.listTools()).tools;
      for (const n of ['read', 'write', 'list', 'done']) assert.ok(tools.some((t) => t.name === n), n);
      const r = await client.callTool({ name: 'read', arguments: { path: 'src/a.c' } });
      assert.equal(r.isError, false, JSON.stringify(r));
      assert.match(r.content[0].text, /int main/);
      const l = await client.callTool({ name: 'list', arguments: { path: 'src' } });
      assert.equal(l.isError, false, JSON.stringify(l));
      assert.match(JSON.stringify(l.structuredContent), /a\.c/);
      // tool-execution failures: results the model can read, with the reason and code
      const nf = await client.callTool({ name: 'read', arguments: { path: 'src/nope.c' } });
      assert.equal(nf.isError, true, JSON.stringify(nf));
      assert.deepEqual([nf.structuredContent.error.reason, nf.structuredContent.error.code], ['not_found', -32011]);
      assert.equal(nf.content[0].type, 'text');
      assert.ok(nf.content[0].text.length > 0);
      const ex = await client.callTool({ name: 'read', arguments: { path: 'secrets/token.txt' } });
      assert.equal(ex.isError, true, JSON.stringify(ex));
      assert.deepEqual([ex.structuredContent.error.reason, ex.structuredContent.error.code], ['excluded', -32012]);
      // an unknown tool and bad arguments stay JSON-RPC errors (Invalid params)
      await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602);
      await assert.rejects(client.callTool({ name: 'read', arguments: { path: 7 } }), (e) => e.code === -32602);
      // nothing of the secret left the walls
      assert.doesNotMatch(JSON.stringify(ex), /hunter2/);
    } finally {
      await client.close();
    }
  });
}

test('POST /mcp: tokens, Origin, limits, media types and methods', async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
  let r = await post(ping);
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate'), /^Bearer/);
  r = await post(ping, { token: 'jbt_' + 'A'.repeat(43) });
  assert.equal(r.status, 401);
  assert.equal((await post(ping, { token: S.buyerToken })).status, 403);
  assert.equal((await post(ping, { token: srv.serviceToken })).status, 403);
  r = await post(ping, { token: S.agentToken });
  assert.deepEqual([r.status, r.json.result], [200, {}]);
  // DNS rebinding: a browser Origin that is not loopback (nor allowed) is refused
  r = await post(ping, { token: S.agentToken, headers: { origin: 'http://evil.example.com' } });
  assert.equal(r.status, 403);
  assert.equal(r.json.error.code, -32600);
  r = await post(ping, { token: S.agentToken, headers: { origin: 'https://localhost:3000' } });
  assert.equal(r.status, 200);
  r = await post(ping, { token: S.agentToken, headers: { origin: 'null' } });
  assert.equal(r.status, 403);
  // the body limit (JAILBOX_MAX_BODY_BYTES, 1 MiB) before parsing
  r = await post(undefined, { token: S.agentToken, raw: '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + 'a'.repeat(1 << 20) + '"}}' });
  assert.equal(r.status, 413);
  // strict JSON: depth, duplicate keys, syntax
  r = await post(undefined, { token: S.agentToken, raw: '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + '['.repeat(70) + ']'.repeat(70) + '}}' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32700]);
  r = await post(undefined, { token: S.agentToken, raw: '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32700]);
  r = await post(undefined, { token: S.agentToken, raw: '{"jsonrpc":' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32700]);
  // batches: refused (2025-06-18 removed them)
  r = await post([ping, ping], { token: S.agentToken });
  assert.deepEqual([r.status, r.json.error.code], [400, -32600]);
  // media types
  r = await post(ping, { token: S.agentToken, headers: { accept: 'text/html' } });
  assert.equal(r.status, 406);
  r = await post(ping, { token: S.agentToken, headers: { accept: 'application/json;q=0, text/event-stream' } });
  assert.equal(r.status, 406);
  r = await post(ping, { token: S.agentToken, headers: { 'content-type': 'text/plain' } });
  assert.equal(r.status, 415);
  // an unsupported MCP-Protocol-Version: 400 with the versions we speak
  r = await post(ping, { token: S.agentToken, headers: { 'mcp-protocol-version': '2099-01-01' } });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, -32022);
  assert.equal(r.json.error.data.requested, '2099-01-01');
  assert.deepEqual(r.json.error.data.supported.slice(0, 4), [MODERN, '2025-11-25', '2025-06-18', '2025-03-26']);
  // no stream and no sessions: GET and DELETE are 405
  for (const method of ['GET', 'DELETE']) {
    const g = await fetch(srv.url + '/mcp', { method, headers: { authorization: 'Bearer ' + S.agentToken, accept: 'text/event-stream' } });
    assert.equal(g.status, 405, method);
    assert.equal(g.headers.get('allow'), 'POST');
  }
  // a notification: 202 without a body
  r = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { token: S.agentToken });
  assert.deepEqual([r.status, r.text], [202, '']);
});

test('POST /mcp: initialize negotiates 2025-03-26, 2025-06-18 and 2025-11-25, and moves the session to active', async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  assert.equal((await kit.sessionOf(S.jobId)).state, 'awaiting_agent');
  for (const v of ['2025-03-26', '2025-06-18', '2025-11-25']) {
    const r = await post({ jsonrpc: '2.0', id: v, method: 'initialize',
      params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 't', version: '1' } } }, { token: S.agentToken });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual([r.json.id, r.json.result.protocolVersion, r.json.result.serverInfo.name], [v, v, 'jailbox']);
    assert.equal(r.json.result.resultType, undefined, 'legacy results carry no resultType');
  }
  // a version we do not know in initialize: our latest legacy one, the client decides
  const r = await post({ jsonrpc: '2.0', id: 9, method: 'initialize',
    params: { protocolVersion: '2099-01-01', capabilities: {}, clientInfo: { name: 't', version: '1' } } }, { token: S.agentToken });
  assert.equal(r.json.result.protocolVersion, '2025-11-25');
  assert.equal((await kit.sessionOf(S.jobId)).state, 'active');
  // a request under a negotiated legacy version, with its header
  const l = await post({ jsonrpc: '2.0', id: 10, method: 'tools/list' }, { token: S.agentToken, headers: { 'mcp-protocol-version': '2025-06-18' } });
  assert.ok(l.json.result.tools.some((t) => t.name === 'read'));
});

test('POST /mcp at 2026-07-28: stateless requests without initialize, server/discover, the error rules', async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  const serverInfo = { name: 'jailbox', version: '0.1.0' };
  let r = await modern(S.agentToken, 1, 'tools/list');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result.resultType, 'complete');
  assert.deepEqual(r.json.result._meta['io.modelcontextprotocol/serverInfo'], serverInfo);
  assert.equal(typeof r.json.result.ttlMs, 'number');
  assert.equal(r.json.result.cacheScope, 'private'); // the list depends on the session (exec)
  assert.ok(r.json.result.tools.some((t) => t.name === 'read'));
  r = await modern(S.agentToken, 'd', 'server/discover');
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.result.supportedVersions.slice(0, 4), [MODERN, '2025-11-25', '2025-06-18', '2025-03-26']);
  assert.deepEqual(r.json.result.capabilities, { tools: { listChanged: false }, extensions: { 'io.modelcontextprotocol/tasks': {} } });
  assert.deepEqual([r.json.result.resultType, r.json.result.cacheScope], ['complete', 'public']);
  assert.deepEqual(r.json.result._meta['io.modelcontextprotocol/serverInfo'], serverInfo);
  // a tool call without any handshake: its session became active, its failure an isError result
  r = await modern(S.agentToken, 2, 'tools/call', { name: 'read', arguments: { path: 'src/a.c' } });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual([r.json.result.isError, r.json.result.resultType], [false, 'complete']);
  assert.match(r.json.result.content[0].text, /int main/);
  assert.equal((await kit.sessionOf(S.jobId)).state, 'active');
  r = await modern(S.agentToken, 3, 'tools/call', { name: 'read', arguments: { path: 'gone.txt' } });
  assert.deepEqual([r.json.result.isError, r.json.result.structuredContent.error.reason], [true, 'not_found']);
  // required _meta fields: -32602 and 400
  r = await post({ jsonrpc: '2.0', id: 4, method: 'tools/list', params: {} },
    { token: S.agentToken, headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/list' } });
  assert.deepEqual([r.status, r.json.error.code, r.json.id], [400, -32602, 4]);
  r = await post({ jsonrpc: '2.0', id: 5, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } },
    { token: S.agentToken, headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/list' } });
  assert.deepEqual([r.status, r.json.error.code], [400, -32602]);
  // headers against the body: -32020 and 400
  r = await modern(S.agentToken, 6, 'tools/list', {}, { 'mcp-method': 'tools/call' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32020]);
  r = await modern(S.agentToken, 7, 'tools/call', { name: 'read', arguments: { path: 'README' } }, { 'mcp-name': 'write' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32020]);
  r = await modern(S.agentToken, 8, 'tools/call', { name: 'read', arguments: { path: 'README' } },
    { 'mcp-name': '=?base64?' + Buffer.from('read').toString('base64') + '?=' });
  assert.equal(r.status, 200, r.text);
  r = await modern(S.agentToken, 9, 'tools/list', {}, { 'mcp-method': null });
  assert.deepEqual([r.status, r.json.error.code], [400, -32020]);
  r = await modern(S.agentToken, 10, 'tools/list', {}, { 'mcp-protocol-version': '2025-11-25' });
  assert.deepEqual([r.status, r.json.error.code], [400, -32020]);
  // an unsupported version declared in both: UnsupportedProtocolVersionError, 400
  r = await post({ jsonrpc: '2.0', id: 11, method: 'server/discover',
    params: { _meta: { ...META, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } },
  { token: S.agentToken, headers: { 'mcp-protocol-version': '2099-01-01', 'mcp-method': 'server/discover' } });
  assert.deepEqual([r.status, r.json.error.code, r.json.error.data.requested], [400, -32022, '2099-01-01']);
  // methods that 2026-07-28 removed, and unknown ones: 404 and -32601
  for (const m of ['initialize', 'ping', 'logging/setLevel', 'no/such']) {
    r = await modern(S.agentToken, 12, m);
    assert.deepEqual([r.status, r.json.error.code], [404, -32601], m);
  }
});

test('a supervised write over HTTP waits for the buyer without holding the HTTP thread', async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const write = modern(S.agentToken, 1, 'tools/call', { name: 'write', arguments: { path: 'src/b.c', content: 'int b;\n' } });
  const op = await kit.waitFor('pending write', async () => {
    const p = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
    return p.json?.ops?.[0];
  }, 30000);
  // the only HTTP thread serves these while the write waits
  const t0 = Date.now();
  const pings = await Promise.all(Array.from({ length: 8 }, (_, i) => post({ jsonrpc: '2.0', id: i, method: 'ping' }, { token: S.agentToken })));
  assert.deepEqual(pings.map((p) => p.status), Array(8).fill(200));
  assert.ok(Date.now() - t0 < 5000, `pings took ${Date.now() - t0} ms`);
  const ap = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${op.opId}`, { token: S.buyerToken });
  assert.equal(ap.status, 200, ap.text);
  const r = await write;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result.isError, false, r.text);
  assert.equal(readFileSync(join(S.dir, 'src/b.c'), 'utf8'), 'int b;\n');
  // a rejected one: an isError result with reason rejected
  const w2 = modern(S.agentToken, 2, 'tools/call', { name: 'write', arguments: { path: 'src/c.c', content: 'int c;\n' } });
  const op2 = await kit.waitFor('pending write', async () => {
    const p = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
    return p.json?.ops?.[0];
  }, 30000);
  const rj = await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${op2.opId}`, { token: S.buyerToken, body: { reason: 'no' } });
  assert.equal(rj.status, 200, rj.text);
  const r2 = await w2;
  assert.deepEqual([r2.json.result.isError, r2.json.result.structuredContent.error.reason], [true, 'rejected']);
});

// a 2026-07-28 request from a client that declares the Tasks extension
function tasked(token, id, method, params = {}) {
  const meta = { ...META, 'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } } };
  const name = params.name ?? params.taskId;
  return post({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } }, { token,
    headers: { 'mcp-protocol-version': MODERN, 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) } });
}

test('Tasks extension: a supervised call becomes a task the agent polls; the buyer\'s decision completes it', async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const other = await kit.openSession(build, { mode: 'supervised' });
  // server/discover offers the extension
  const d = await tasked(S.agentToken, 1, 'server/discover');
  assert.ok(d.json.result.capabilities.extensions['io.modelcontextprotocol/tasks'], d.text);
  // an unsupervised-style answer for a read: no task
  const rd = await tasked(S.agentToken, 2, 'tools/call', { name: 'read', arguments: { path: 'README' } });
  assert.equal(rd.json.result.resultType ?? 'complete', 'complete', rd.text);
  assert.match(rd.json.result.content[0].text, /tiny C project/);
  // a supervised write answers at once with a CreateTaskResult
  const t0 = Date.now();
  const w = await tasked(S.agentToken, 3, 'tools/call', { name: 'write', arguments: { path: 'src/t.c', content: 'int t;\n' } });
  assert.equal(w.status, 200, w.text);
  assert.ok(Date.now() - t0 < 10000, `the task took ${Date.now() - t0} ms to be created`);
  const task = w.json.result;
  assert.equal(task.resultType, 'task', w.text);
  assert.match(task.taskId, /^jbt-[0-9a-f]{32}$/);
  assert.equal(task.status, 'working');
  // tasks/get while the buyer has not decided: working, nothing written
  const g1 = await tasked(S.agentToken, 4, 'tasks/get', { taskId: task.taskId });
  assert.equal(g1.json.result.status, 'working', g1.text);
  assert.ok(!existsSync(join(S.dir, 'src/t.c')));
  // the task is this session's alone: another agent's token does not find it
  const g2 = await tasked(other.agentToken, 5, 'tasks/get', { taskId: task.taskId });
  assert.equal(g2.json.error?.code, -32602, g2.text);
  // a client without the capability: -32021, HTTP 400
  const nc = await modern(S.agentToken, 6, 'tasks/get', { taskId: task.taskId }, { 'mcp-name': task.taskId });
  assert.deepEqual([nc.status, nc.json.error?.code], [400, -32021], nc.text);
  // Mcp-Name must carry the taskId
  const mm = await post({ jsonrpc: '2.0', id: 7, method: 'tasks/get', params: { taskId: task.taskId, _meta: { ...META, 'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } } } } },
    { token: S.agentToken, headers: { 'mcp-protocol-version': MODERN, 'mcp-method': 'tasks/get', 'mcp-name': 'jbt-0' } });
  assert.equal(mm.status, 400, mm.text);
  // tasks/cancel is acknowledged; the op stays the buyer's to decide
  const c = await tasked(S.agentToken, 8, 'tasks/cancel', { taskId: task.taskId });
  assert.equal(c.json.result?.resultType, 'complete', c.text); // an empty result
  assert.ok(!('status' in c.json.result) && !('taskId' in c.json.result), c.text);
  const op = (await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken })).json.ops[0];
  assert.ok(op, 'the write is still pending after tasks/cancel');
  assert.equal((await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${op.opId}`, { token: S.buyerToken })).status, 200);
  const done = await kit.waitFor('completed task', async () => {
    const g = await tasked(S.agentToken, 9, 'tasks/get', { taskId: task.taskId });
    return g.json.result?.status === 'completed' && g.json.result;
  }, 20000);
  assert.equal(done.result.isError, false, JSON.stringify(done));
  assert.equal(done.result.structuredContent.written, 7, JSON.stringify(done));
  assert.equal(readFileSync(join(S.dir, 'src/t.c'), 'utf8'), 'int t;\n');
  // a rejected one completes with an isError result naming the reason
  const w2 = await tasked(S.agentToken, 10, 'tools/call', { name: 'write', arguments: { path: 'src/u.c', content: 'u\n' } });
  const op2 = await kit.waitFor('pending write', async () => {
    const p = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
    return p.json?.ops?.[0];
  }, 20000);
  assert.equal((await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${op2.opId}`, { token: S.buyerToken, body: { reason: 'not now' } })).status, 200);
  const rej = await kit.waitFor('rejected task', async () => {
    const g = await tasked(S.agentToken, 11, 'tasks/get', { taskId: w2.json.result.taskId });
    return g.json.result?.status === 'completed' && g.json.result;
  }, 20000);
  assert.deepEqual([rej.result.isError, rej.result.structuredContent.error.reason], [true, 'rejected'], JSON.stringify(rej));
  assert.ok(!existsSync(join(S.dir, 'src/u.c')));
  // an unknown task id, and none at all
  assert.equal((await tasked(S.agentToken, 12, 'tasks/get', { taskId: 'jbt-00000000000000000000000000000000' })).json.error?.code, -32602);
  // over HTTP a request without a taskId has no Mcp-Name to match: a header mismatch (the
  // other transports answer -32602, tests/unit/api/test_mcp.c)
  const nt = await tasked(S.agentToken, 13, 'tasks/get', {});
  assert.deepEqual([nt.status, nt.json.error?.code], [400, -32020], nt.text);
});

test('clients that hang up while their supervised calls wait: the REST API and /mcp keep answering, late answers are dropped', async () => {
  const S = await kit.openSession(build, { mode: 'supervised' });
  const N = 10;
  const aborts = [];
  const calls = [];
  for (let i = 0; i < N; i++) {
    const ac = new AbortController();
    aborts.push(ac);
    calls.push(fetch(srv.url + '/mcp', {
      method: 'POST', signal: ac.signal,
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: 'Bearer ' + S.agentToken,
                 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'write' },
      body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call',
                             params: { name: 'write', arguments: { path: `src/w${i}.c`, content: `int w${i};\n` }, _meta: META } }),
    }).then((r) => r.text()).catch((e) => e.name));
  }
  const pending = async () => (await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken })).json?.ops ?? [];
  await kit.waitFor('pending writes', async () => (await pending()).length >= 1, 30000);
  await new Promise((r) => setTimeout(r, 500));
  for (const ac of aborts) ac.abort(); // every client hangs up
  const outcomes = await Promise.all(calls);
  assert.ok(outcomes.some((o) => o === 'AbortError'), JSON.stringify(outcomes));
  // the REST API and /mcp answer at once while the calls still wait
  const t0 = Date.now();
  const ops = await pending();
  const ping = await post({ jsonrpc: '2.0', id: 99, method: 'ping' }, { token: S.agentToken });
  assert.equal(ping.status, 200, ping.text);
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  // the buyer answers the calls whose clients are gone (nothing to send them to), each as it
  // asks: a write still reading its target when its client hung up asks later, and until it
  // is answered it holds one of the server's places for waiting calls
  const open = async () => ((await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?limit=500`, { token: S.buyerToken })).json?.ops ?? [])
    .filter((o) => ['pending', 'approved', 'running'].includes(o.state));
  let asked = ops;
  for (let quiet = 0, t = Date.now(); quiet < 3; asked = await pending()) {
    assert.ok(Date.now() - t < 30000, 'calls whose clients hung up still unanswered: ' + JSON.stringify(await open()));
    for (const op of asked) {
      const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${op.opId}`, { token: S.buyerToken, body: { reason: 'gone' } });
      assert.equal(r.status, 200, r.text);
    }
    quiet = asked.length === 0 && (await open()).length === 0 ? quiet + 1 : 0;
    await new Promise((r) => setTimeout(r, 200));
  }
  // and a new call is served whole
  const w = modern(S.agentToken, 100, 'tools/call', { name: 'write', arguments: { path: 'src/after.c', content: 'int after;\n' } });
  const op = await kit.waitFor('the new write', async () => (await pending()).find((o) => o.path === 'src/after.c'), 30000);
  assert.equal((await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${op.opId}`, { token: S.buyerToken })).status, 200);
  const r = await w;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result.isError, false, r.text);
  assert.equal(readFileSync(join(S.dir, 'src/after.c'), 'utf8'), 'int after;\n');
  // one more left waiting: the server drains with it suspended (checked in after())
  lingering = modern(S.agentToken, 101, 'tools/call', { name: 'write', arguments: { path: 'src/late.c', content: 'int late;\n' } });
  await kit.waitFor('the lingering write', async () => (await pending()).find((o) => o.path === 'src/late.c'), 30000);
});

// the stdio bridge driven line by line: a pass-through for every revision
function rawBridge(S) {
  const c = spawn(CTL, ['mcp-bridge', '--job', S.jobId], {
    env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_WS_URL: 'ws://' + kit.wsAddr, JAILBOX_AGENT_TOKEN: S.agentToken } });
  children.push(c);
  let buf = '';
  const lines = [], waiters = [];
  c.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
      while (waiters.length && lines.length) waiters.shift()(lines.shift());
    }
  });
  return {
    send: (m) => c.stdin.write(JSON.stringify(m) + '\n'),
    next: (ms = 20000) => new Promise((res, rej) => {
      if (lines.length) return res(JSON.parse(lines.shift()));
      const t = setTimeout(() => rej(new Error('no line from the bridge')), ms);
      waiters.push((l) => { clearTimeout(t); res(JSON.parse(l)); });
    }),
    end: () => c.stdin.end(),
  };
}

test('the stdio bridge passes 2026-07-28 requests through: server/discover, tools/list and tools/call with _meta', async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  const b = rawBridge(S);
  b.send({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: META } });
  let r = await b.next();
  assert.equal(r.id, 1);
  assert.equal(r.result.supportedVersions[0], MODERN);
  b.send({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: META } });
  r = await b.next();
  assert.equal(r.result.resultType, 'complete');
  b.send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'read', arguments: { path: 'nope' }, _meta: META } });
  r = await b.next();
  assert.deepEqual([r.result.isError, r.result.structuredContent.error.reason, r.result.resultType], [true, 'not_found', 'complete']);
  b.send({ jsonrpc: '2.0', id: 4, method: 'initialize', params: { _meta: META } });
  r = await b.next();
  assert.equal(r.error.code, -32601);
  b.send({ jsonrpc: '2.0', id: 5, method: 'tools/list', params: { _meta: { ...META, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } });
  r = await b.next();
  assert.deepEqual([r.error.code, r.error.data.requested], [-32022, '2099-01-01']);
  b.end();
});

// The conformance suite's CLI (Node 20: fs.globSync from lib/globsync) against a proxy that adds
// the agent's bearer token; resolves its exit code and output.
function conformance(url, args) {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, ['--import', './lib/globsync/register.mjs',
      join(here, 'node_modules/@modelcontextprotocol/conformance/dist/index.js'), 'server', '--url', url,
      '--expected-failures', join(here, 'conformance-baseline.yml'), ...args], { cwd: here });
    children.push(c);
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => { out += d; });
    c.on('close', (code) => resolve({ code, out }));
  });
}

test('the MCP conformance suite passes at 2025-11-25 and 2026-07-28 but for conformance-baseline.yml', { timeout: 900000 }, async () => {
  const S = await kit.openSession(build, { mode: 'unsupervised' });
  const target = new URL(srv.url);
  const proxy = http.createServer((req, res) => {
    const p = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method,
      headers: { ...req.headers, authorization: 'Bearer ' + S.agentToken } }, (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    });
    p.on('error', () => res.destroy());
    req.pipe(p);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  const url = `http://localhost:${proxy.address().port}/mcp`;
  try {
    for (const args of [['--spec-version', '2025-11-25'], ['--requirements', MODERN],
      ['--scenario', 'http-header-validation', '--spec-version', MODERN]]) {
      const r = await conformance(url, args);
      const summary = r.out.slice(Math.max(0, r.out.lastIndexOf('=== SUMMARY ===')));
      assert.equal(r.code, 0, args.join(' ') + ':\n' + summary.slice(-8000));
      assert.match(r.out, /passed/);
    }
  } finally {
    proxy.close();
  }
});
