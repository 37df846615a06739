// build.mjs — bench/exec/run.sh, second part: building Debian's libyaml source tree
// (deploy/demo-source.sh: `apt-get source libyaml`, cached under var/demo-src/) with
// `make -f libyaml.mk -j2 check` (the tree has no configure script and the image no autotools
// or cmake: libyaml.mk builds what its CMakeLists.txt does) through the agent's `exec`
// (writable, a fresh session on a fresh copy each round: jailboxd → worker → the spawner → a
// jail inside gVisor + Docker, with the workspace walked before and after for the command's
// changes) against the same build in `docker run --rm --runtime=runsc` of the same image on a
// fresh copy, alternating one of each per round. Both get 2 CPUs and 2 GiB; the docker run
// has no seccomp profile (see below). Prints each
// round, the medians and the ratio (the target: ≤ 1.15×); and, from the same rounds,
// what the landing checks cost the writable command (the worker's "exec landing timings": the
// pre-image of the covered entries before it, the links resolved and the landing undo after
// it), as the ratio of the exec with them to the exec without them (target: ≤ 1.1×).
// Usage: node build.mjs [ROUNDS] (default 3; run.sh passes it). The image is
// jailbox-sandbox-build:bench (+ JB_IMAGE_SUFFIX), built by build.sh --userland.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, JAILBOXD } from '../../tests/node/lib/server.mjs';
import { agentKit } from '../../tests/node/lib/agent.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const rounds = Number(process.argv[2] ?? 3);
const IMAGE = 'jailbox-sandbox-build:bench' + (process.env.JB_IMAGE_SUFFIX ?? '');
const MK = join(ROOT, 'bench/exec/libyaml.mk');
const MAKE = 'make -f jailbox-bench.mk -j2 check';

execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
  ['--userland', '--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', IMAGE], { stdio: 'inherit' });
const SRC = execFileSync(join(ROOT, 'deploy/demo-source.sh'), ['libyaml', join(ROOT, 'var/demo-src')])
  .toString().trim();

// a fresh copy of the tree with the makefile, in `dir`
const copyTree = (dir) => {
  cpSync(SRC, dir, { recursive: true });
  copyFileSync(MK, join(dir, 'jailbox-bench.mk'));
};

const srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: IMAGE, JAILBOX_ESCAPE_ABORT: 'none',
  JAILBOX_EXEC_MAX_TIMEOUT_S: '3600' });
const K = agentKit(srv);
try {
  await K.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()), 120000);
  const jailbox = async () => {
    const S = await K.openSession(copyTree, { mode: 'unsupervised', limits: { cpus: 2, memoryMiB: 2048, pids: 512 } });
    const agent = await K.connect(S.agentToken);
    const t = performance.now();
    const r = await K.call(agent, 'exec', { command: MAKE, writable: true, timeoutSec: 3600, maxOutputBytes: 65536 }, 3700000);
    const dt = performance.now() - t;
    const res = r.result?.structuredContent;
    if (!res || r.result.isError || res.exitCode !== 0 || !/0 fail\(s\)/.test(res.stdout))
      throw new Error('exec make: ' + JSON.stringify(r).slice(0, 2000));
    agent.close();
    await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: srv.serviceToken, body: { reason: 'bench cleanup' } });
    // the landing checks of this exec, from the worker's log lines for its session
    const lines = srv.log().split('\n').filter((l) => l.includes('exec landing timings') && l.includes(S.jobId));
    const landing = lines.reduce((sum, l) => sum + Number(l.match(/"(?:preimage|checks)Ms":"([\d.]+)"/)?.[1] ?? 0), 0);
    return { dt, inJail: res.durationMs, changes: res.changesTotal, landing };
  };
  const docker = () => {
    const dir = mkdtempSync(join(tmpdir(), 'jb-bench-libyaml-'));
    copyTree(join(dir, 'src'));
    const t = performance.now();
    // no seccomp profile: under runsc, with Docker 20.10's default profile and with
    // deploy/seccomp/jailbox.json alike, make's spawn of `mkdir` failed with EPERM (in a
    // command's jail exec's filter answers clone3 with ENOSYS first); without one the
    // baseline only gets faster
    const r = spawnSync('docker', ['run', '--rm', '--runtime=runsc', '--cpus', '2', '--memory', '2g',
      '--security-opt', 'seccomp=unconfined',
      '--ulimit', 'nproc=512', '-v', `${dir}/src:/src`, '-w', '/src', IMAGE, 'sh', '-c', MAKE],
    { maxBuffer: 64 << 20 });
    const dt = performance.now() - t;
    rmSync(dir, { recursive: true, force: true });
    if (r.status !== 0 || !/0 fail\(s\)/.test(r.stdout)) throw new Error('docker run make: ' + r.stderr + r.stdout.toString().slice(-2000));
    return { dt };
  };
  const tj = [], td = [], tl = [];
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 === 0 ? ['jailbox', 'docker'] : ['docker', 'jailbox'];
    for (const which of order) {
      if (which === 'jailbox') {
        const x = await jailbox();
        tj.push(x.dt);
        tl.push(x.dt - x.landing);
        console.log(`round ${i + 1}: jailbox exec ${(x.dt / 1000).toFixed(1)} s (the command ${(x.inJail / 1000).toFixed(1)} s, ${x.changes} changes found, landing checks ${x.landing.toFixed(1)} ms)`);
      } else {
        const x = docker();
        td.push(x.dt);
        console.log(`round ${i + 1}: docker run --runtime=runsc ${(x.dt / 1000).toFixed(1)} s`);
      }
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`libyaml ${MAKE}, ${rounds} alternating rounds (${cpus().length} cores, load ${execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ')})`);
  console.log(`jailbox exec (writable, agent tools/call): median ${(med(tj) / 1000).toFixed(1)} s; docker run --rm --runtime=runsc: median ${(med(td) / 1000).toFixed(1)} s`);
  console.log(`ratio jailbox / docker run ${(med(tj) / med(td)).toFixed(2)}x (target <= 1.15x)`);
  console.log(`landing checks: exec with them / without them ${(med(tj) / med(tl)).toFixed(4)}x (target <= 1.1x)`);
} finally {
  K.closeSockets();
  await srv.stop();
}
