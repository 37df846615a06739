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
// the minimal image plus the host's true (build.sh --extra)
const K = await startSandboxServer('jailbox-sandbox:bench-exec', { JAILBOX_ESCAPE_ABORT: 'none' }, ['/usr/bin/true']);
try {
  const S = await K.openSession(() => {}, { mode: 'unsupervised' });
  const container = execFileSync('docker', ['ps', '-q', '--no-trunc', '--filter', 'label=jailbox.session=' + S.jobId]).toString().trim();
  if (!container) throw new Error('no container for the session');
  const agent = await K.connect(S.agentToken);
  const jailbox = async () => {
    const t = performance.now();
    const r = await K.call(agent, 'exec', { argv: ['true'] });
    const dt = performance.now() - t;
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
  for (let i = 0; i < 3; i++) { await jailbox(); docker(); } // warm: page cache, the spawner
  const tj = [], td = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) { tj.push(await jailbox()); td.push(docker()); } else { td.push(docker()); tj.push(await jailbox()); }
  }
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  const row = (name, xs) => console.log(`${name}: p50 ${q(xs, 0.5).toFixed(1)} ms  p90 ${q(xs, 0.9).toFixed(1)} ms  min ${Math.min(...xs).toFixed(1)} ms`);
  console.log(`exec true, ${rounds} alternating rounds (${cpus().length} cores, load ${execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ')})`);
  row('jailbox exec (agent tools/call exec)', tj);
  row('docker exec CONTAINER true', td);
  console.log(`ratio docker exec / jailbox exec p50 ${(q(td, 0.5) / q(tj, 0.5)).toFixed(2)}x (target >= 10x); published first exec: E2B ~200 ms, Daytona ~111 ms (other machines)`);
  agent.close();
} finally {
  K.closeSockets();
  await K.srv.stop();
}
