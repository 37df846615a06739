// bench.mjs — bench/exec/run.sh: `exec true` through the whole stack (npm socket.io-client agent
// → jailboxd → jailbox-worker → the session's spawner → a fresh bwrap jail + exec's filter +
// setpriv + the in-jail helper, inside gVisor + Docker) against `docker exec CONTAINER true` on
// the same session container, alternating per round so that the machine's drift falls on
// both, with an idle gap before every call (as between an agent's commands). Two kinds of
// jailbox call per round: in the jail the spawner built ahead (the common case: a command of
// the same kind as the last one), and in a jail built for the request (the kind alternates:
// writable, then read-only — what every command cost before jails were built ahead). Prints
// p50/p90/min of each, the ratio of the medians (docker exec / jailbox exec; the target
// is ≥ 10×), the same against E2B's (~200 ms) and Daytona's (~111 ms) published first-exec
// figures (other machines: only for scale), and where the time went: the worker's `exec
// timings` log lines (sandbox/worker/exec_op.c) with the spawner's timingsMs.
// Usage: node bench.mjs [ROUNDS] (run.sh passes it); GAP_MS (default 1000).
import { execFileSync, spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { cpus } from 'node:os';
import { startSandboxServer } from '../../tests/node/lib/agent.mjs';

const rounds = Number(process.argv[2] ?? 30);
const GAP_MS = Number(process.env.GAP_MS ?? 1000);
const E2B_MS = 200, DAYTONA_MS = 111; // published first-exec figures
// the minimal image plus the host's /bin/sh (exec is offered only with a shell) and true
// (build.sh --extra)
const K = await startSandboxServer('jailbox-sandbox:bench-exec', { JAILBOX_ESCAPE_ABORT: 'none' },
  [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/true']);
try {
  const S = await K.openSession(() => {}, { mode: 'unsupervised' });
  const container = execFileSync('docker', ['ps', '-q', '--no-trunc', '--filter', 'label=jailbox.session=' + S.jobId]).toString().trim();
  if (!container) throw new Error('no container for the session');
  const agent = await K.connect(S.agentToken);
  const calls = []; // per jailbox call: {kind, start, end} (epoch ms)
  const jailbox = async (kind, writable) => {
    const w0 = Date.now(), t = performance.now();
    const r = await K.call(agent, 'exec', { argv: ['true'], writable });
    const dt = performance.now() - t;
    calls.push({ kind, start: w0, end: Date.now() });
    if (!r.result || r.result.isError || r.result.structuredContent.exitCode !== 0)
      throw new Error('exec true: ' + JSON.stringify(r).slice(0, 300));
    return dt;
  };
  const docker = () => {
    const t = performance.now();
    const r = spawnSync('docker', ['exec', container, 'true']);
    const dt = performance.now() - t;
    if (r.status !== 0) throw new Error('docker exec true: ' + r.stderr);
    return dt;
  };
  // what either side does in the background after answering (the spawner builds the next
  // jail; docker's exec teardown) must not fall on the other's measurement
  const gap = () => new Promise((r) => setTimeout(r, GAP_MS));
  const T = { warm: [], cold: [], docker: [] };
  // one round: read-only in the jail built ahead (the last command was read-only too), then
  // writable and read-only again, each in a jail built for it; docker exec before or after
  const ours = async () => {
    await gap(); T.warm.push(await jailbox('warm', false));
    await gap(); T.cold.push(await jailbox('cold', true));
    await gap(); T.cold.push(await jailbox('cold', false));
  };
  const theirs = async () => { await gap(); T.docker.push(docker()); };
  for (let i = 0; i < 2; i++) { await ours(); await theirs(); } // page cache, the first jails
  for (const k of Object.keys(T)) T[k].length = 0;
  const measuredFrom = calls.length;
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) { await ours(); await theirs(); } else { await theirs(); await ours(); }
  }
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  const row = (name, xs) => console.log(`${name}: p50 ${q(xs, 0.5).toFixed(1)} ms  p90 ${q(xs, 0.9).toFixed(1)} ms  min ${Math.min(...xs).toFixed(1)} ms  (n=${xs.length})`);
  console.log(`exec true, ${rounds} alternating rounds, ${GAP_MS} ms idle before each call (${cpus().length} cores, load ${execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ')})`);
  row('jailbox exec, jail built ahead (agent tools/call exec)', T.warm);
  row('jailbox exec, jail built for the request', T.cold);
  row('docker exec CONTAINER true', T.docker);
  const w = q(T.warm, 0.5), c = q(T.cold, 0.5), d = q(T.docker, 0.5);
  console.log(`ratio docker exec / jailbox exec p50: ${(d / w).toFixed(2)}x built ahead, ${(d / c).toFixed(2)}x built for the request (target >= 10x)`);
  console.log(`against published first-exec figures (other machines, for scale): E2B ~${E2B_MS} ms: ${(E2B_MS / w).toFixed(2)}x; Daytona ~${DAYTONA_MS} ms: ${(DAYTONA_MS / w).toFixed(2)}x (>1: jailbox faster)`);
  // where the time went, per kind: each measured call with the worker's log line of its op
  // (the one claimed while the call was open)
  const lines = K.srv.log().split('\n').filter((l) => l.includes('"msg":"exec timings"')).map((l) => JSON.parse(l).timingsMs);
  const measured = calls.slice(measuredFrom);
  for (const kind of ['warm', 'cold']) {
    const stages = {};
    for (const call of measured.filter((c) => c.kind === kind)) {
      const t = lines.find((x) => x.claimedAtEpoch >= call.start - 1 && x.claimedAtEpoch <= call.end + 1);
      if (!t) continue;
      const inWorker = t.markRunning + t.snapshotBefore + t.spawner + t.effects + t.complete;
      const { claimedAtEpoch, inSpawner: sp = {}, ...worker } = t;
      const jailboxd = { total: call.end - call.start, toWorker: claimedAtEpoch - call.start, fromWorker: call.end - claimedAtEpoch - inWorker };
      // the spawner's own stages against the worker's view of it: the rest is the channel
      const spawnerChannel = t.spawner - ['jailWait', 'command', 'jailEnd', 'drain'].reduce((a, k) => a + Math.max(0, sp[k] ?? 0), 0);
      for (const [k, v] of Object.entries({ ...jailboxd, ...worker, ...sp, spawnerChannel }))
        if (typeof v === 'number') (stages[k] ??= []).push(v);
    }
    console.log(`stages, ${kind === 'warm' ? 'jail built ahead' : 'jail built for the request'} — p50 (min) ms:`);
    console.log('  ' + Object.entries(stages).map(([k, v]) => `${k} ${q(v, 0.5).toFixed(1)} (${Math.min(...v).toFixed(1)})`).join('  '));
  }
  console.log('  (total = the call; jailboxd: toWorker = call → claim, fromWorker = commit → answer; worker: markRunning, snapshotBefore and effects (writable only),');
  console.log('   spawner, complete (outcome + audit commit); spawner: jailWait (request → hand-over: the build when not ahead), jailBuild (bwrap → helper ready;');
  console.log('   off the path when built ahead), command (spawn + run + exit), jailEnd (helper, bwrap init, pid namespace), drain; spawnerChannel = the rest)');
  agent.close();
} finally {
  K.closeSockets();
  await K.srv.stop();
}
