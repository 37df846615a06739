// jail.mjs — helpers for tests that run worker-backed sessions (real dockerd + runsc + bwrap)
// and act as their agent and buyer with the stock socket.io-client: the Docker Engine API,
// the worker's control socket (requests straight to a session's shim), socket connections
// that record their events, MCP tool calls, and waiting.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { io } from 'socket.io-client';
import { startServer, JAILBOXD } from './server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = join(here, '../../..');
export const DOCKER_SOCK = '/var/run/docker.sock';

export function docker(method, path, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({ socketPath: DOCKER_SOCK, method, path: '/v1.41' + path,
      headers: payload ? { 'content-type': 'application/json' } : {} }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(data); } catch { json = undefined; }
        resolve({ status: res.statusCode, json });
      });
    });
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

// containers (also stopped ones) labelled with session `jobId`, as `docker ps -a` lists them
export async function containersOf(jobId) {
  const r = await docker('GET', '/containers/json?all=1&filters=' +
    encodeURIComponent(JSON.stringify({ label: ['jailbox.session=' + jobId] })));
  return r.json;
}

// one request over the worker's control socket: {jobId, request, timeoutMs} -> its answer
export function control(sock, msg, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const c = net.createConnection(sock);
    let buf = '';
    const t = setTimeout(() => { c.destroy(); reject(new Error('control: timeout')); }, timeoutMs);
    c.on('connect', () => c.write(JSON.stringify(msg) + '\n'));
    c.on('data', (d) => {
      buf += d;
      const k = buf.indexOf('\n');
      if (k >= 0) { clearTimeout(t); c.end(); resolve(JSON.parse(buf.slice(0, k))); }
    });
    c.on('error', (e) => { clearTimeout(t); reject(e); });
  });
}

// a jailboxd with one worker, the sandbox image `image` built from `shim` (a binary next to
// jailboxd), and the worker's control socket at srv.ctl
// (`extra`: host binaries added to the image, as build.sh --extra takes them)
export async function startJail({ image, shim = 'jailbox-shim-test', env = {}, extra = [] }) {
  image += process.env.JB_IMAGE_SUFFIX ?? ''; // keeps the images of parallel checkouts apart
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--shim', join(dirname(JAILBOXD), shim), '--tag', image, ...extra.flatMap((x) => ['--extra', x])],
    { stdio: 'inherit' });
  const ctl = join(tmpdir(), 'jbctl-' + Math.random().toString(36).slice(2) + '.sock');
  const srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_WORKER_CONTROL: ctl, JAILBOX_SANDBOX_IMAGE: image, ...env });
  srv.ctl = ctl;
  srv.wsAddr = srv.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];
  await waitFor(srv, 'worker ready', () => /"msg":"worker ready"/.test(srv.log()));
  return srv;
}

// `fn()`'s first truthy value, tried every 50 ms for up to `timeoutMs`; fails at once, naming
// the crash and the end of the log, when `srv`'s jailboxd died (srv.crashed)
export async function waitFor(srv, what, fn, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const crash = srv?.crashed?.();
    if (crash) throw new Error(`${crash} while waiting for ${what}:\n${srv.log().slice(-6000)}`);
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what + '\n' + (srv ? srv.log().slice(-6000) : ''));
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function sessionOf(srv, jobId) {
  const r = await srv.req('GET', '/v1/jailbox/' + jobId, { token: srv.serviceToken });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

export async function waitState(srv, jobId, states, timeoutMs = 60000) {
  return waitFor(srv, `${jobId} in ${states}`, async () => {
    const s = await sessionOf(srv, jobId);
    return states.includes(s.state) ? s : null;
  }, timeoutMs);
}

// opens a session on a workspace built by `build(dir)` and waits for `until` (default: the
// sandbox is up and the agent awaited)
export async function openSession(srv, build = () => {}, extra = {}, until = 'awaiting_agent') {
  const name = 'ws-' + Math.random().toString(36).slice(2);
  const dir = join(srv.wsroot, name);
  mkdirSync(dir, { recursive: true });
  build(dir);
  const s = await srv.open({ workspace: name, ...extra });
  const st = await waitState(srv, s.jobId, [until, 'failed', 'aborted'], 120000);
  assert.equal(st.state, until, st.stateReason);
  return { ...s, dir, containerId: st.walls?.walls?.docker?.containerId };
}

// a Socket.IO client of `srv` that records every event (s.events) and whether the server
// disconnected it (s.serverDisconnect)
export function connect(srv, token) {
  const s = io('http://' + srv.wsAddr, { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true });
  s.events = [];
  s.onAny((event, payload) => s.events.push({ event, payload, at: Date.now() }));
  s.on('disconnect', (why) => { s.disconnectReason = why; });
  (srv.sockets ||= []).push(s);
  return new Promise((res, rej) => { s.once('connect', () => res(s)); s.once('connect_error', rej); });
}

export function waitEvent(s, name, pred = () => true, ms = 20000) {
  const have = s.events.find((e) => e.event === name && pred(e.payload));
  if (have) return Promise.resolve(have.payload);
  return new Promise((res, rej) => {
    const t = setTimeout(() => { s.offAny(f); rej(new Error(`no ${name} within ${ms} ms; got ${JSON.stringify(s.events).slice(0, 2000)}`)); }, ms);
    const f = (event, payload) => { if (event === name && pred(payload)) { clearTimeout(t); s.offAny(f); res(payload); } };
    s.onAny(f);
  });
}

let rpcId = 0;
export function call(agent, name, args, ms = 60000) {
  return agent.timeout(ms).emitWithAck('mcp', { jsonrpc: '2.0', id: ++rpcId, method: 'tools/call', params: { name, arguments: args } });
}

export async function closeAll(srv) {
  for (const s of srv.sockets || []) s.close();
}

// The end of a file that started several servers (an `after` hook): each one's sockets closed
// and the server stopped, all of them before anything is asserted (a failed check must not
// leave the later servers running: they would keep this process alive until ctest's timeout);
// then no sanitizer report in any log, and no container left behind for any session.
export async function stopServers(servers, { sanitizer = true } = {}) {
  const ends = [];
  const stopErrors = [];
  for (const s of servers) {
    try {
      await closeAll(s);
      const jobs = (await s.db.query('SELECT job_id FROM sessions').catch(() => ({ rows: [] }))).rows.map((r) => r.job_id);
      const log = s.log();
      await s.stop();
      ends.push({ log, jobs });
    } catch (e) { // the next server is stopped all the same
      stopErrors.push(e);
    }
  }
  for (const { log, jobs } of ends) {
    if (sanitizer) assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
    for (const j of jobs) assert.deepEqual(await containersOf(j), [], 'container left behind for ' + j);
  }
  if (stopErrors.length) throw stopErrors[0];
}
