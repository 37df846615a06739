// bench.mjs — approvals per second and event delivery latency, one jailboxd (in-process
// events, the single-instance deployment) against two behind nginx (Redis fan-out), in the
// same run on the same PostgreSQL. See run.sh for what is measured and printed.
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  ROOT, cleanup, scratch, sharedSecrets, sleep, startInstance, startNginx, startPostgres, startRedis,
} from '../../tests/node/lib/cluster.mjs';

const require = createRequire(join(ROOT, 'tests/node/package.json'));
const { io } = require('socket.io-client');
const pgmod = require('pg');

const OPS = Number(process.env.OPS || 3000);        // approvals per phase
const CONC = Number(process.env.CONC || 16);        // approvals in flight (one session each)
const WARMUP = 5;                                   // approvals per session before timing
const HZ = 100;                                     // clock ticks per second (/proc stat)

// CPU seconds (user + system) of a pid and its descendants' totals are not needed: every
// process here is measured by its own pid list.
function cpu(pids) {
  let t = 0;
  for (const p of pids) {
    try {
      const f = readFileSync(`/proc/${p}/stat`, 'utf8');
      const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
      t += (Number(rest[11]) + Number(rest[12])) / HZ; // utime, stime
    } catch { /* gone */ }
  }
  return t;
}
function childrenOf(ppid) {
  const out = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const f = readFileSync(`/proc/${d}/stat`, 'utf8');
      const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === ppid) out.push(Number(d));
    } catch { /* gone */ }
  }
  return out;
}
function pgPids(pg) {
  const pm = Number(readFileSync(join(pg.host, '..', 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
  return [pm, ...childrenOf(pm)];
}

const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

async function phase(label, { restUrls, wsAddrs, secrets, db, procs }) {
  // CONC sessions, each with OPS/CONC pending ops, a buyer socket per session
  const per = Math.ceil(OPS / CONC) + WARMUP;
  const sessions = [];
  for (let i = 0; i < CONC; i++) {
    const ws = `bench-${label.length}-${i}`;
    mkdirSync(join(wsroot, ws), { recursive: true });
    const r = await fetch(restUrls[i % restUrls.length] + '/v1/jailbox', {
      method: 'POST', headers: { authorization: 'Bearer ' + secrets.token, 'content-type': 'application/json' },
      body: JSON.stringify({ agentId: 'bench-agent', workspace: ws }),
    });
    if (r.status !== 201) throw new Error('open: ' + r.status + ' ' + (await r.text()));
    const s = await r.json();
    await db.query("UPDATE sessions SET state = 'active' WHERE job_id = $1", [s.jobId]);
    const ids = (await db.query(
      "INSERT INTO ops (job_id, tool, path, args, state) SELECT $1, 'write', 'f' || g, '{}', 'pending' FROM generate_series(1, $2) g RETURNING op_id",
      [s.jobId, per])).rows.map((x) => Number(x.op_id));
    const sock = io('http://' + wsAddrs[i % wsAddrs.length], { transports: ['websocket'], auth: { token: s.buyerToken }, forceNew: true, reconnection: false });
    await new Promise((res, rej) => { sock.once('connect', res); sock.once('connect_error', rej); });
    sessions.push({ ...s, ids, sock, sent: new Map(), lat: [] });
  }
  for (const s of sessions)
    s.sock.on('jailbox:op', (p) => { const t0 = s.sent.get(p.opId); if (t0 !== undefined && p.state === 'approved') { s.lat.push(performance.now() - t0); s.sent.delete(p.opId); } });
  // warm-up, not measured: the first approvals of every session (connections, prepared statements)
  await Promise.all(sessions.map(async (s, i) => {
    for (const id of s.ids.splice(0, WARMUP)) {
      const r = await fetch(`${restUrls[i % restUrls.length]}/v1/jailbox/${s.jobId}/approve/${id}`, { method: 'POST', headers: { authorization: 'Bearer ' + s.buyerToken } });
      await r.arrayBuffer();
    }
  }));
  await sleep(300);
  const before = Object.fromEntries(Object.entries(procs()).map(([k, v]) => [k, cpu(v)]));
  const client0 = process.cpuUsage();
  const t0 = performance.now();
  let errors = 0;
  // what the database backends of the instances wait on, sampled every 20 ms
  const waits = {};
  let sampling = true, samples = 0;
  const sampler = (async () => {
    while (sampling) {
      const r = await db.query("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*)::int AS n FROM pg_stat_activity" +
        " WHERE application_name <> 'jailboxd-listen' AND backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1");
      samples++;
      for (const x of r.rows) waits[x.w] = (waits[x.w] || 0) + x.n;
      await sleep(20);
    }
  })();
  await Promise.all(sessions.map(async (s, i) => {
    const url = restUrls[i % restUrls.length];
    for (const id of s.ids) {
      s.sent.set(id, performance.now());
      const r = await fetch(`${url}/v1/jailbox/${s.jobId}/approve/${id}`, { method: 'POST', headers: { authorization: 'Bearer ' + s.buyerToken } });
      await r.arrayBuffer();
      if (r.status !== 200) errors++;
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  sampling = false;
  await sampler;
  const cu = process.cpuUsage(client0);
  // the last events may still be on their way
  for (let k = 0; k < 100 && sessions.some((s) => s.sent.size); k++) await sleep(20);
  const after = Object.fromEntries(Object.entries(procs()).map(([k, v]) => [k, cpu(v)]));
  const lat = sessions.flatMap((s) => s.lat);
  const lost = sessions.reduce((n, s) => n + s.sent.size, 0);
  for (const s of sessions) s.sock.close();
  const n = sessions.reduce((a, s) => a + s.ids.length, 0);
  const approved = Number((await db.query("SELECT count(*) FROM ops WHERE state = 'approved' AND job_id = ANY($1)", [sessions.map((s) => s.jobId)])).rows[0].count) - WARMUP * CONC;
  const usage = Object.fromEntries(Object.keys(before).map((k) => [k, (after[k] - before[k]) / wall]));
  usage['bench client'] = (cu.user + cu.system) / 1e6 / wall;
  const pgWaits = Object.fromEntries(Object.entries(waits).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, v / samples]));
  return { label, n, wall, rate: n / wall, errors, approved, lost, p50: pct(lat, 0.5), p99: pct(lat, 0.99), usage, pgWaits };
}

function report(r) {
  console.log(`${r.label}: ${r.n} approvals in ${r.wall.toFixed(2)} s = ${r.rate.toFixed(0)} approvals/s` +
    ` (errors ${r.errors}, committed ${r.approved}); event delivery p50 ${r.p50?.toFixed(1)} ms, p99 ${r.p99?.toFixed(1)} ms, undelivered ${r.lost}`);
  const cores = Object.entries(r.usage).map(([k, v]) => `${k} ${(v * 100).toFixed(0)}%`).join(', ');
  console.log(`  PostgreSQL backends busy on average, by wait: ${waitsLine(r)}`);
  console.log(`  CPU (% of one core over the phase): ${cores}; machine total ${(Object.values(r.usage).reduce((a, b) => a + b, 0) * 100).toFixed(0)}% of ${100 * (await_cores())}%`);
}
function waitsLine(r) {
  return Object.entries(r.pgWaits).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ') || 'none';
}
function await_cores() { return Number(readFileSync('/proc/cpuinfo', 'utf8').match(/^processor/gm).length); }

const dir = scratch('jbbench-scale-');
const wsroot = join(dir, 'workspaces');
mkdirSync(wsroot, { recursive: true });
let pg, redis, single, A, B, lb, db;
try {
  pg = await startPostgres(dir);
  redis = await startRedis(dir);
  const secrets = sharedSecrets(dir);
  db = new pgmod.Pool({ host: pg.host, user: 'ext', database: 'postgres', max: 2 });
  const env = { JAILBOX_HTTP_THREADS: process.env.HTTP_THREADS || '8', JAILBOX_DB_POOL_SIZE: '16', JAILBOX_LOG_LEVEL: 'warn' };

  // one instance, in-process events (no JAILBOX_REDIS_URL)
  single = await startInstance('single', dir, { pg, redis: null, secrets, wsroot, env: { ...env, JAILBOX_LOG_LEVEL: 'info' } });
  const r1 = await phase('1 instance (in-process events)', {
    restUrls: [single.url], wsAddrs: [single.wsAddr], secrets, db,
    procs: () => ({ jailboxd: [single.child.pid], postgres: pgPids(pg) }),
  });
  await single.stop();

  A = await startInstance('a', dir, { pg, redis, secrets, wsroot, env: { ...env, JAILBOX_LOG_LEVEL: 'info' } });
  B = await startInstance('b', dir, { pg, redis, secrets, wsroot, env: { ...env, JAILBOX_LOG_LEVEL: 'info' } });
  lb = await startNginx(dir, [A, B]);
  await sleep(1500); // both subscribed to Redis
  const lbAddr = lb.url.replace('http://', '');
  const r2 = await phase('2 instances behind nginx (Redis fan-out)', {
    restUrls: [lb.url], wsAddrs: [lbAddr], secrets, db,
    procs: () => ({ 'jailboxd-a': [A.child.pid], 'jailboxd-b': [B.child.pid], postgres: pgPids(pg),
      'redis-server': [redis.pid], nginx: (() => { const m = Number(readFileSync(join(dir, 'nginx/nginx.pid'), 'utf8')); return [m, ...childrenOf(m)]; })() }),
  });
  report(r1);
  report(r2);
  console.log(`ratio 2 instances / 1 instance: approvals/s ${(r2.rate / r1.rate).toFixed(2)}x, event delivery p99 ${(r2.p99 / r1.p99).toFixed(2)}x`);
  const top = Object.entries(r2.usage).sort((a, b) => b[1] - a[1]);
  const total = top.reduce((a, [, v]) => a + v, 0);
  console.log(`bottleneck (2 instances): ${top[0][0]} uses the most CPU (${(top[0][1] * 100).toFixed(0)}% of a core); ` +
    `the machine is ${(100 * total / await_cores()).toFixed(0)}% busy over ${await_cores()} cores` +
    (total / await_cores() > 0.85 ? ' — CPU-bound: a second instance on the same 2 cores cannot add throughput' : ' — not CPU-bound'));
  for (const r of [r1, r2]) {
    const [w, n] = Object.entries(r.pgWaits)[0] || ['none', 0];
    console.log(`  ${r.label}: PostgreSQL's top wait ${w} (${n.toFixed(2)} backends on average)` +
      (w === 'Lock:object' ? ' — commits queue on the NOTIFY lock (jb_change and jb_op triggers): PostgreSQL serialises them' : ''));
  }
  if (r1.errors || r2.errors || r1.approved !== r1.n || r2.approved !== r2.n || r1.lost || r2.lost) {
    console.log('FAILED: errors, uncommitted approvals or undelivered events'); process.exitCode = 1;
  }
} finally {
  if (db) await db.end();
  for (const p of [single, A, B, lb]) if (p) await p.stop();
  if (redis) await redis.stop();
  if (pg) pg.stop();
  cleanup(dir);
}
