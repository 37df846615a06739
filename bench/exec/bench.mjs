// bench.mjs — bench/exec/run.sh: `exec true` through the whole stack (npm socket.io-client agent
// → jailboxd → jailbox-worker → the session's spawner → a fresh bwrap jail + exec's filter +
// setpriv + the in-jail helper, inside gVisor + Docker) against `docker exec CONTAINER true` on
// the same session container, alternating one of each per round so that the machine's drift
// falls on both. Prints p50/p90/min of each and the ratio of the medians (docker exec /
// jailbox exec; the target is ≥ 10×), beside the published first-exec figures of
// E2B (~200 ms) and Daytona (~111 ms), which are other machines' and only for scale.
// Usage: node bench.mjs [ROUNDS] (run.sh passes it).
import { execFileSync, spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { startSandboxServer } from '../../tests/node/lib/agent.mjs';

const rounds = Number(process.argv[2] ?? 30);
const GAP_MS = Number(process.env.GAP_MS ?? 1000);
// the minimal image plus the host's true (build.sh --extra)
const K = await startSandboxServer('jailbox-sandbox:bench-exec', { JAILBOX_ESCAPE_ABORT: 'none' }, ['/usr/bin/true']);
try {
  const S = await K.openSession(() => {}, { mode: 'unsupervised' });
  const container = execFileSync('docker', ['ps', '-q', '--no-trunc', '--filter', 'label=jailbox.session=' + S.jobId]).toString().trim();
  if (!container) throw new Error('no container for the session');
  const agent = await K.connect(S.agentToken);
  const walls = []; // [call start, call end] as epoch ms, per measured call
  const jailbox = async () => {
    const w0 = Date.now(), t = performance.now();
    const r = await K.call(agent, 'exec', { argv: ['true'] });
    const dt = performance.now() - t;
    walls.push([w0, Date.now()]);
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
  // an idle gap before every measurement, as between an agent's commands: what either side
  // does in the background after answering (the spawner builds the next jail; docker's exec
  // teardown) does not fall on the other's measurement
  const gap = () => new Promise((r) => setTimeout(r, GAP_MS));
  for (let i = 0; i < 3; i++) { await jailbox(); await gap(); docker(); await gap(); } // warm: page cache, the spawner
  walls.length = 0;
  const tj = [], td = [];
  for (let r = 0; r < rounds; r++) {
    await gap();
    if (r % 2 === 0) { tj.push(await jailbox()); await gap(); td.push(docker()); } else { td.push(docker()); await gap(); tj.push(await jailbox()); }
  }
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  const row = (name, xs) => console.log(`${name}: p50 ${q(xs, 0.5).toFixed(1)} ms  p90 ${q(xs, 0.9).toFixed(1)} ms  min ${Math.min(...xs).toFixed(1)} ms`);
  console.log(`exec true, ${rounds} alternating rounds, ${GAP_MS} ms idle before each call (${cpus().length} cores, load ${execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ')})`);
  row('jailbox exec (agent tools/call exec)', tj);
  row('docker exec CONTAINER true', td);
  console.log(`ratio docker exec / jailbox exec p50 ${(q(td, 0.5) / q(tj, 0.5)).toFixed(2)}x (target >= 10x); published first exec: E2B ~200 ms, Daytona ~111 ms (other machines)`);
  // where the time went: the worker's "exec timings" lines (sandbox/worker/exec_op.c) of the
  // measured rounds, medians per stage
  const lines = K.srv.log().split('\n').filter((l) => l.includes('"msg":"exec timings"')).slice(-rounds);
  const measured = walls.slice(-rounds);
  const stages = {};
  lines.forEach((l, i) => {
    const t = JSON.parse(l).timingsMs;
    const inWorker = t.markRunning + t.snapshotBefore + t.spawner + t.effects + t.complete;
    const { claimedAtEpoch, ...rest } = t;
    const extra = measured[i] ? { toWorker: claimedAtEpoch - measured[i][0], fromWorker: measured[i][1] - claimedAtEpoch - inWorker } : {};
    // the spawner's own stages against the worker's view of it: the rest is the channel both ways
    const sp = t.inSpawner ?? {};
    const spawnerChannel = t.spawner - ['jailWait', 'command', 'jailEnd', 'drain'].reduce((a, k) => a + Math.max(0, sp[k] ?? 0), 0);
    for (const [k, v] of Object.entries({ ...extra, ...rest, ...sp, spawnerChannel }))
      if (typeof v === 'number') (stages[k] ??= []).push(v);
  });
  console.log('stages, p50 ms — jailboxd: toWorker (call → claim), fromWorker (commit → answer); worker: markRunning snapshotBefore spawner effects complete; spawner: jailWait (0: jail built ahead) jailBuild (off the path when warm) command jailEnd drain, spawnerChannel (the rest of spawner):');
  console.log('  ' + Object.entries(stages).map(([k, v]) => `${k} ${q(v, 0.5).toFixed(1)}`).join('  '));
  console.log('  min: ' + Object.entries(stages).map(([k, v]) => `${k} ${Math.min(...v).toFixed(1)}`).join('  '));
  agent.close();
} finally {
  K.closeSockets();
  await K.srv.stop();
}
