// bench/relay/bench.mjs — the op relay, agent → jailboxd → ops row → worker →
// jailbox-shim inside the walls → back, against `docker exec` into the same session
// container in the same run (see run.sh for the setting and the targets).
//
// Starts a real jailboxd (embedded PostgreSQL, one jailbox-worker, the three walls), opens an
// unsupervised session on a workspace holding a 4 KiB file, connects an agent with the npm
// socket.io-client and issues sequential MCP tools/call requests, each timed from emit to
// ack. The baseline runs the docker CLI against the session's own container, each call timed
// from spawn to exit, as a user without jailbox would reach the file.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync, chmodSync, statSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { io } from 'socket.io-client';
import { createConnection } from 'node:net';

const env = process.env;
const JAILBOXD = env.JAILBOXD;
const IMAGE = env.IMAGE;
const N_READ = Number(env.N_READ || 2000);
const N_WRITE = Number(env.N_WRITE || 200);
const N_EXEC = Number(env.N_EXEC || 40);
const READ_SIZE = 4096;
const WRITE_SIZE = 1024 * 1024;

const dir = mkdtempSync(join(tmpdir(), 'jbbench-relay-'));
chmodSync(dir, 0o711);
const wsroot = join(dir, 'ws');
mkdirSync(join(wsroot, 'w'), { recursive: true });
const content4k = Buffer.alloc(READ_SIZE);
for (let i = 0; i < READ_SIZE; i++) content4k[i] = 0x61 + (i % 26);
writeFileSync(join(wsroot, 'w/f4k.txt'), content4k);

let child;
let log = '';
function stop() {
  if (child && child.exitCode === null) child.kill('SIGTERM');
}
process.on('exit', () => {
  stop();
  if (env.BENCH_LOG) writeFileSync(env.BENCH_LOG, log); // the server's log, for profiling
  // the server may still be writing its state as it stops: retry, and never fail the run on it
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  } catch (e) {
    console.error(`bench: ${dir} left behind (${e.code})`);
  }
});

async function waitFor(what, fn, ms = 120000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what + '\n' + log.slice(-4000));
    await new Promise((r) => setTimeout(r, 20));
  }
}

function pct(sorted, p) {
  const i = Math.max(1, Math.ceil(sorted.length * p / 100));
  return sorted[i - 1];
}
function summary(ms) {
  const s = [...ms].sort((a, b) => a - b);
  const total = ms.reduce((a, b) => a + b, 0);
  return { n: ms.length, opsPerS: ms.length / (total / 1000), p50: pct(s, 50), p99: pct(s, 99) };
}
function line(label, r) {
  console.log(`  ${label.padEnd(52)} ${r.opsPerS.toFixed(1).padStart(9)} ops/s   p50 ${r.p50.toFixed(3).padStart(9)} ms   p99 ${r.p99.toFixed(3).padStart(9)} ms   (n=${r.n})`);
}
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function main() {
  child = spawn(JAILBOXD, [], {
    env: { ...env, JAILBOX_LISTEN: '127.0.0.1:0', JAILBOX_WS_LISTEN: '127.0.0.1:0', JAILBOX_STATE_DIR: join(dir, 'state'),
           JAILBOX_WORKSPACE_ROOT: wsroot, JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: IMAGE,
           JAILBOX_WS_MAX_PAYLOAD: String(4 * 1024 * 1024), JAILBOX_LOG_LEVEL: env.JAILBOX_LOG_LEVEL || 'info' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr.on('data', (d) => { log += d; if (log.length > 64e6) log = log.slice(-32e6); });
  const url = await waitFor('listening', () => (log.match(/"msg":"listening","addr":"([^"]+)"/) || [])[1]);
  const wsAddr = await waitFor('ws listening', () => (log.match(/"msg":"ws listening","addr":"([^"]+)"/) || [])[1]);
  await waitFor('worker ready', () => /"msg":"worker ready"/.test(log));
  const token = readFileSync(join(dir, 'state/service.token'), 'utf8').trim();
  const req = async (method, path, body, tok = token) => {
    const r = await fetch('http://' + url + path, { method, headers: { authorization: 'Bearer ' + tok, 'content-type': 'application/json' },
      body: body ? JSON.stringify(body) : undefined });
    return r.json();
  };
  const s = await req('POST', '/v1/jailbox', { agentId: 'bench', workspace: 'w', mode: 'unsupervised' });
  if (!s.jobId) throw new Error('open: ' + JSON.stringify(s));
  const st = await waitFor('awaiting_agent', async () => {
    const x = await req('GET', '/v1/jailbox/' + s.jobId);
    return ['awaiting_agent', 'failed'].includes(x.state) ? x : null;
  }, 180000);
  if (st.state !== 'awaiting_agent') throw new Error('session ' + st.state + ': ' + st.stateReason);
  const container = execFileSync('docker', ['ps', '-q', '--no-trunc', '--filter', 'label=jailbox.session=' + s.jobId]).toString().trim();
  if (!container) throw new Error('no container for the session');

  const agent = io('http://' + wsAddr, { transports: ['websocket'], auth: { token: s.agentToken }, reconnection: false });
  await new Promise((res, rej) => { agent.once('connect', res); agent.once('connect_error', rej); });
  let id = 0;
  const call = async (name, args) => {
    const r = await agent.timeout(60000).emitWithAck('mcp', { jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
    if (!r.result || r.result.isError) throw new Error(name + ': ' + JSON.stringify(r.error ?? r.result));
    return r.result.structuredContent;
  };

  console.log(`relay, unsupervised session (${cpus().length} cores, docker ${execFileSync('docker', ['version', '-f', '{{.Server.Version}}']).toString().trim()}, ${execFileSync('runsc', ['--version']).toString().split('\n')[0]})`);

  // 4 KiB read
  for (let i = 0; i < 50; i++) await call('read', { path: 'f4k.txt' }); // warm-up
  const reads = [];
  for (let i = 0; i < N_READ; i++) {
    const t0 = process.hrtime.bigint();
    const r = await call('read', { path: 'f4k.txt' });
    reads.push(ms(t0));
    if (r.length !== READ_SIZE) throw new Error('short read: ' + JSON.stringify(r).slice(0, 200));
  }
  const execs = [];
  for (let i = 0; i < N_EXEC; i++) {
    const t0 = process.hrtime.bigint();
    const r = spawnSync('docker', ['exec', container, 'cat', '/workspace/f4k.txt']);
    execs.push(ms(t0));
    if (r.status !== 0 || r.stdout.length !== READ_SIZE) throw new Error('docker exec cat: ' + r.stderr);
  }
  const jr = summary(reads), dr = summary(execs);
  line('4 KiB read, jailbox (agent tools/call read)', jr);
  line('4 KiB read, docker exec CONTAINER cat FILE', dr);
  console.log(`  4 KiB read: jailbox/docker-exec rate ratio ${(jr.opsPerS / dr.opsPerS).toFixed(1)}x   (targets: p50 <= 2 ms, ratio >= 50x)`);
  // Two floors of the read, measured in the same minutes: an MCP ping over the same socket
  // (client, Socket.IO, jailboxd's handler hop, no worker, no database), and one durable
  // commit of a single-row insert on the same PostgreSQL (pgbench, one client): a read's
  // record is committed, its WAL flushed, before the answer leaves the worker.
  const pings = [];
  for (let i = 0; i < Math.max(200, N_READ >> 2); i++) {
    const t0 = process.hrtime.bigint();
    const r = await agent.timeout(60000).emitWithAck('mcp', { jsonrpc: '2.0', id: ++id, method: 'ping' });
    pings.push(ms(t0));
    if (!r.result) throw new Error('ping: ' + JSON.stringify(r));
  }
  line('floor: MCP ping on the agent socket (no worker, no DB)', summary(pings));
  // the worker alone: the same read handed straight to the worker on its ops socket
  // (sandbox/proto/direct.h) — shim through the walls + the op's durable record, no jailboxd
  {
    const sock = createConnection(join(dir, 'state/worker-0.ops'));
    await new Promise((res, rej) => { sock.once('connect', res); sock.once('error', rej); });
    let buf = '';
    let waiter = null;
    sock.on('data', (d) => { buf += d; const i = buf.indexOf('\n'); if (i >= 0 && waiter) { const l = buf.slice(0, i); buf = buf.slice(i + 1); const w = waiter; waiter = null; w(l); } });
    const line1 = JSON.stringify({ jobId: s.jobId, tool: 'read', path: 'f4k.txt', args: {}, expect: null }) + '\n';
    const directs = [];
    for (let i = 0; i < Math.max(200, N_READ >> 2); i++) {
      const t0 = process.hrtime.bigint();
      const l = await new Promise((res) => { waiter = res; sock.write(line1); });
      directs.push(ms(t0));
      const a = JSON.parse(l);
      if (!a.ran || !a.answer.ok) throw new Error('direct: ' + l.slice(0, 300));
    }
    line('floor: the worker alone (its ops socket: shim + record)', summary(directs));
    sock.destroy();
  }
  const pgbin = (spawnSync('sh', ['-c', 'ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1']).stdout || '').toString().trim();
  if (pgbin) {
    const sql = join(dir, 'insert.sql');
    writeFileSync(sql, "INSERT INTO bench_commit (payload) VALUES (repeat('x', 700));\n");
    spawnSync('psql', ['-X', '-q', '-h', join(dir, 'state/pg/run'), '-U', 'jailbox', '-c',
      'CREATE TABLE IF NOT EXISTS bench_commit (id bigserial PRIMARY KEY, payload text)', 'jailbox']);
    const pb = spawnSync(join(pgbin, 'pgbench'), ['-n', '-h', join(dir, 'state/pg/run'), '-U', 'jailbox', '-f', sql,
      '-c', '1', '-T', '3', '-M', 'prepared', 'jailbox']).stdout.toString();
    const lat = (pb.match(/latency average = ([0-9.]+) ms/) || [])[1];
    console.log(`  floor: one durable single-row commit on the same PostgreSQL (pgbench -c 1, 3 s): latency average ${lat} ms`);
  }

  // 1 MiB write
  const big = Buffer.alloc(WRITE_SIZE);
  for (let i = 0; i < WRITE_SIZE; i++) big[i] = 0x61 + ((i * 7) % 26);
  const text = big.toString('utf8');
  for (let i = 0; i < 5; i++) await call('write', { path: 'w1m.txt', content: text });
  const writes = [];
  for (let i = 0; i < N_WRITE; i++) {
    const t0 = process.hrtime.bigint();
    const r = await call('write', { path: 'w1m.txt', content: text });
    writes.push(ms(t0));
    if (r.written !== WRITE_SIZE) throw new Error('short write: ' + JSON.stringify(r));
  }
  if (statSync(join(wsroot, 'w/w1m.txt')).size !== WRITE_SIZE) throw new Error('the write did not land');
  const wexecs = [];
  for (let i = 0; i < N_EXEC; i++) {
    const t0 = process.hrtime.bigint();
    const r = spawnSync('docker', ['exec', '-i', container, 'sh', '-c', 'cat > /workspace/x1m.txt'], { input: big });
    wexecs.push(ms(t0));
    if (r.status !== 0) throw new Error('docker exec -i sh -c cat: ' + r.stderr);
  }
  if (statSync(join(wsroot, 'w/x1m.txt')).size !== WRITE_SIZE) throw new Error('the docker exec write did not land');
  const jw = summary(writes), dw = summary(wexecs);
  line('1 MiB write, jailbox (agent tools/call write)', jw);
  line("1 MiB write, docker exec -i CONTAINER sh -c 'cat > FILE'", dw);
  console.log(`  1 MiB write: jailbox/docker-exec rate ratio ${(jw.opsPerS / dw.opsPerS).toFixed(1)}x`);
  // which way the ops went (api/rest/metrics.c), and the shim's channel (the session contract)
  const m = await (await fetch('http://' + url + '/metrics', { headers: { authorization: 'Bearer ' + token } })).text();
  const handled = (p) => (m.match(new RegExp(`^jailbox_ops_handled_total\\{path="${p}"\\} (\\d+)`, 'm')) || [])[1];
  const walls = (await req('GET', '/v1/jailbox/' + s.jobId)).walls || {};
  console.log(`  ops handed to the worker directly ${handled('direct')}, queued ${handled('queued')}; shim channel ${(walls.shimChannel || {}).kind}`);
  agent.close();
  await req('POST', `/v1/jailbox/${s.jobId}/abort`, {}, s.buyerToken);
}

main().then(() => { stop(); process.exit(0); }, (e) => { console.error(e.stack || e); stop(); process.exit(1); });
