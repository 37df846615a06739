// bench.mjs — bench/ws: Socket.IO on loopback, jailboxd against a minimal Node
// socket.io server (node_server.mjs) in the same run.
//  1. idle: N concurrent idle Socket.IO clients (default 10,000); server RSS per connection.
//  2. fan-out: F clients (default 1,000) in one session; approvals over REST (concurrency C)
//     each broadcast one jailbox:op event to all F; events delivered per second and delivery
//     latency p50/p99 (request sent → event received).
// Clients are raw `ws` sockets speaking Engine.IO v4 / Socket.IO v5 (open → 40{token},
// answer pings), spread over worker threads. Usage: node bench.mjs (env: JAILBOXD, N, F, C,
// SECONDS, WORKERS, RATE = offered events/s, 0 = as fast as answered). Run through ./run.sh.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import http from 'node:http';
import WebSocket from 'ws';

const here = dirname(fileURLToPath(import.meta.url));

// ---------- worker: a share of the clients ----------
function workerMain() {
  const { url, token, count, sample } = workerData;
  const socks = [];
  const hist = new Uint32Array(100000); // 0.1 ms buckets up to 10 s
  let delivered = 0;
  const sent = new Map(); // opId → send time (ms, performance.timeOrigin-based)
  parentPort.on('message', (m) => {
    if (m.type === 'sent') sent.set(m.opId, m.t);
    else if (m.type === 'report') {
      parentPort.postMessage({ type: 'report', delivered, hist });
    } else if (m.type === 'reset') { delivered = 0; hist.fill(0); }
    else if (m.type === 'close') { for (const s of socks) s.terminate(); parentPort.postMessage({ type: 'closed' }); }
  });
  const now = () => performance.timeOrigin + performance.now();
  const one = (i) => new Promise((resolve, reject) => {
    const w = new WebSocket(url, { perMessageDeflate: false });
    const timed = i < sample;
    w.on('message', (data) => {
      const s = data.toString();
      if (s.startsWith('42')) {
        delivered++;
        if (timed) {
          const m = /"opId":(\d+)/.exec(s);
          const t0 = m && sent.get(Number(m[1]));
          if (t0) hist[Math.min(hist.length - 1, Math.floor((now() - t0) * 10))]++;
        }
      } else if (s === '2') w.send('3');
      else if (s[0] === '0') w.send('40' + JSON.stringify({ token }));
      else if (s.startsWith('40')) resolve(w);
      else if (s.startsWith('44')) reject(new Error('connect_error ' + s));
    });
    w.on('error', reject);
  });
  (async () => {
    for (let i = 0; i < count; i += 100) {
      const batch = [];
      for (let k = i; k < Math.min(count, i + 100); k++) batch.push(one(k));
      socks.push(...await Promise.all(batch));
    }
    parentPort.postMessage({ type: 'ready' });
  })().catch((e) => parentPort.postMessage({ type: 'error', error: String(e) }));
}

// ---------- main ----------

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function clients(url, token, count, workers, sample) {
  const ws = [];
  const per = Math.ceil(count / workers);
  for (let i = 0; i < workers; i++) {
    const n = Math.min(per, count - i * per);
    if (n <= 0) break;
    const w = new Worker(fileURLToPath(import.meta.url), { workerData: { url, token, count: n, sample: Math.ceil(sample / workers) } });
    await new Promise((res, rej) => w.once('message', (m) => (m.type === 'ready' ? res() : rej(new Error(m.error)))));
    ws.push(w);
  }
  const ask = (type) => Promise.all(ws.map((w) => new Promise((res) => { w.once('message', res); w.postMessage({ type }); })));
  return {
    sent: (opId, t) => { for (const w of ws) w.postMessage({ type: 'sent', opId, t }); },
    report: () => ask('report'),
    reset: () => { for (const w of ws) w.postMessage({ type: 'reset' }); },
    close: async () => { await ask('close'); await Promise.all(ws.map((w) => w.terminate())); },
  };
}

function percentile(hist, p) {
  let total = 0;
  for (const x of hist) total += x;
  let acc = 0;
  for (let i = 0; i < hist.length; i++) { acc += hist[i]; if (acc >= total * p) return i / 10; }
  return NaN;
}

// Fires POSTs to `pathOf(id)` with concurrency c for `seconds`, telling the clients when each
// was sent; returns how many were answered 200.
async function fire(port, pathOf, ids, c, seconds, headers, cl) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: c });
  const end = Date.now() + seconds * 1000;
  let next = 0, ok = 0;
  const oneReq = (id) => new Promise((res) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: pathOf(id), agent, headers }, (r) => {
      r.resume();
      r.on('end', () => { if (r.statusCode === 200) ok++; res(); });
    });
    req.on('error', () => res());
    cl.sent(id, performance.timeOrigin + performance.now());
    req.end();
  });
  const rate = Number(process.env.RATE || 0); // events/s offered in all; 0: as fast as answered
  const start = Date.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (Date.now() < end && next < ids.length) {
      if (rate) {
        const due = start + (next * 1000) / rate;
        if (due > Date.now()) { await sleep(due - Date.now()); if (Date.now() >= end) break; }
      }
      await oneReq(ids[next++]);
    }
  }));
  agent.destroy();
  return ok;
}

async function measure(name, pid, url, token, trigger, opts) {
  const { N, F, C, SECONDS, WORKERS } = opts;
  // idle memory: warm up with 200, then open the rest
  const warm = await clients(url, token, 200, 1, 0);
  await sleep(500);
  const rss0 = rssKiB(pid);
  const idle = await clients(url, token, N - 200, WORKERS, 0);
  await sleep(1000);
  const rss1 = rssKiB(pid);
  const perConn = ((rss1 - rss0) * 1024) / (N - 200);
  await idle.close();
  await warm.close();
  await sleep(1000);
  // fan-out
  const fan = await clients(url, token, F, WORKERS, Math.min(F, 200));
  await sleep(500);
  if (trigger.prepare) await trigger.prepare();
  fan.reset();
  const t0 = performance.now();
  const ok = await fire(trigger.port, trigger.path, trigger.ids, C, SECONDS, trigger.headers, fan);
  await sleep(1000); // let the last events arrive
  const elapsed = (performance.now() - t0 - 1000) / 1000;
  const reps = await fan.report();
  const delivered = reps.reduce((a, r) => a + r.delivered, 0);
  const hist = new Uint32Array(100000);
  for (const r of reps) for (let i = 0; i < hist.length; i++) hist[i] += r.hist[i];
  await fan.close();
  const res = { name, rssBeforeMiB: rss0 / 1024, rssAfterMiB: rss1 / 1024, bytesPerConn: Math.round(perConn),
    events: ok, eventsPerSec: Math.round(ok / elapsed), deliveredPerSec: Math.round(delivered / elapsed),
    deliveredOfExpected: ok ? delivered / (ok * F) : 0,
    p50ms: percentile(hist, 0.5), p99ms: percentile(hist, 0.99) };
  console.log(JSON.stringify(res));
  return res;
}

async function main() {
  const N = Number(process.env.N || 10000), F = Number(process.env.F || 1000);
  const C = Number(process.env.C || 16), SECONDS = Number(process.env.SECONDS || 10);
  const WORKERS = Number(process.env.WORKERS || 2);
  const opts = { N, F, C, SECONDS, WORKERS };
  const JAILBOXD = process.env.JAILBOXD || join(here, '../../build/jailboxd');
  const dir = mkdtempSync(join(tmpdir(), 'jbwsbench-'));
  chmodSync(dir, 0o711);
  mkdirSync(join(dir, 'ws/bench'), { recursive: true });
  const jb = spawn(JAILBOXD, [], { env: { ...process.env, JAILBOX_LISTEN: '127.0.0.1:0', JAILBOX_WS_LISTEN: '127.0.0.1:0',
    JAILBOX_STATE_DIR: join(dir, 'state'), JAILBOX_WORKSPACE_ROOT: join(dir, 'ws'), JAILBOX_LOG_LEVEL: 'info',
    JAILBOX_WS_MAX_PER_IP: String(N + 1000), JAILBOX_HTTP_THREADS: '8', JAILBOX_DB_POOL_SIZE: '16' },
  stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  jb.stderr.on('data', (d) => { log += d; if (log.length > 1 << 20) log = log.slice(-65536); });
  let stopping = false;
  jb.on('exit', (code, sig) => {
    if (stopping) return;
    console.error(`jailboxd died: code ${code} signal ${sig}\n` + log.slice(-4000));
    process.exit(1);
  });
  const nodeSrv = [];
  try {
    for (let i = 0; i < 600 && !/"msg":"listening"/.test(log); i++) await sleep(100);
    const httpPort = Number(/"msg":"listening","addr":"[^"]+:(\d+)"/.exec(log)[1]);
    const wsPort = Number(/"msg":"ws listening","addr":"[^"]+:(\d+)"/.exec(log)[1]);
    const svc = readFileSync(join(dir, 'state/service.token'), 'utf8').trim();
    const r = await fetch(`http://127.0.0.1:${httpPort}/v1/jailbox`, { method: 'POST',
      headers: { authorization: 'Bearer ' + svc, 'content-type': 'application/json' },
      body: JSON.stringify({ jobId: 'bench', agentId: 'bench-agent', workspace: 'bench' }) });
    const { buyerToken } = await r.json();
    const psql = (sql) => execFileSync('psql', ['-X', '-q', '-t', '-A', '-h', join(dir, 'state/pg/run'),
      '-U', 'jailbox', '-d', 'jailbox', '-c', sql], { encoding: 'utf8' });
    psql("UPDATE sessions SET state = 'active' WHERE job_id = 'bench'");
    // the pending ops to approve are inserted once the clients are connected (a buyer that
    // connects is sent the pending approvals: that is not what the idle run measures)
    const total = C * SECONDS * 2000;
    const ids = [];
    const prepare = async () => {
      psql(`INSERT INTO ops (job_id, tool, path, args, state) SELECT 'bench', 'write', 'src/file-' || g || '.c', '{}', 'pending' FROM generate_series(1, ${total}) g`);
      const [lo, hi] = psql("SELECT min(op_id) || ' ' || max(op_id) FROM ops WHERE job_id = 'bench' AND state = 'pending'").trim().split(' ').map(Number);
      for (let i = lo; i <= hi; i++) ids.push(i);
    };
    // a decided op as the Node server's event template (same size on the wire)
    const one = psql("INSERT INTO ops (job_id, tool, path, args, state) VALUES ('bench', 'write', 'src/file-0.c', '{}', 'pending') RETURNING op_id").trim();
    const tmpl = await (await fetch(`http://127.0.0.1:${httpPort}/v1/jailbox/bench/approve/${one}`, { method: 'POST',
      headers: { authorization: 'Bearer ' + buyerToken } })).json();

    console.log(JSON.stringify({ setup: { N, F, C, SECONDS, WORKERS, cpus: (await import('node:os')).cpus().length } }));
    const jbRes = await measure('jailboxd', jb.pid, `ws://127.0.0.1:${wsPort}/socket.io/?EIO=4&transport=websocket`,
      buyerToken, { port: httpPort, path: (id) => `/v1/jailbox/bench/approve/${id}`, ids, prepare,
        headers: { authorization: 'Bearer ' + buyerToken } }, opts);

    const ns = spawn(process.execPath, [join(here, 'node_server.mjs')], { env: { ...process.env, TOKEN: buyerToken,
      OP_TEMPLATE: JSON.stringify(tmpl) }, stdio: ['ignore', 'pipe', 'inherit'] });
    nodeSrv.push(ns);
    const nport = await new Promise((res) => ns.stdout.once('data', (d) => res(JSON.parse(String(d)).port)));
    const nodeIds = Array.from({ length: total }, (_, i) => i + 1);
    const nRes = await measure('node socket.io', ns.pid, `ws://127.0.0.1:${nport}/socket.io/?EIO=4&transport=websocket`,
      buyerToken, { port: nport, path: (id) => `/approve/${id}`, ids: nodeIds, headers: {} }, opts);

    const ratio = {
      memory: +(jbRes.bytesPerConn / nRes.bytesPerConn).toFixed(3),
      deliveredPerSec: +(jbRes.deliveredPerSec / nRes.deliveredPerSec).toFixed(2),
      p99: +(jbRes.p99ms / nRes.p99ms).toFixed(2),
    };
    console.log(JSON.stringify({ ratio, targets: { bytesPerConn: '<= 20480', memory: '<= 0.2', deliveredPerSec: '>= 3' } }));
  } finally {
    for (const p of nodeSrv) p.kill();
    stopping = true;
    jb.kill('SIGTERM');
    await new Promise((res) => jb.once('exit', res));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (isMainThread) await main();
else workerMain();
