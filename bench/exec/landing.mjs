// landing.mjs — what the landing checks cost a writable command: Debian's libyaml built with
// `make -f libyaml.mk -j2 check` through the agent's `exec` (writable; a fresh session on a
// fresh copy each round) on this build (JAILBOXD) against the same on a base build
// (BASE_BUILD, a build directory of the tree before them), the two servers up side by side and
// called alternately, one of each per round (this VM's speed drifts: only alternation in one
// run compares). Each server's image carries its own build's shim. Prints each round, the
// medians and the ratio (target ≤ 1.1×).
// Usage: BASE_BUILD=DIR node landing.mjs [ROUNDS] (default 3; run.sh passes its third argument).
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, JAILBOXD } from '../../tests/node/lib/server.mjs';
import { agentKit } from '../../tests/node/lib/agent.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const rounds = Number(process.argv[2] ?? 3);
const BASE = process.env.BASE_BUILD;
if (!BASE) throw new Error('landing.mjs: BASE_BUILD must name the base build directory');
const MK = join(ROOT, 'bench/exec/libyaml.mk');
const MAKE = 'make -f jailbox-bench.mk -j2 check';
const suffix = process.env.JB_IMAGE_SUFFIX ?? '';

execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
const SRC = execFileSync(join(ROOT, 'deploy/demo-source.sh'), ['libyaml', join(ROOT, 'var/demo-src')])
  .toString().trim();
const copyTree = (dir) => {
  cpSync(SRC, dir, { recursive: true });
  copyFileSync(MK, join(dir, 'jailbox-bench.mk'));
};

// a server of the build whose jailboxd is `binary`, with an image of that build's shim
async function side(name, binary) {
  const image = `jailbox-sandbox-build:landing-${name}${suffix}`;
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--userland', '--shim', join(dirname(binary), 'jailbox-shim'), '--tag', image], { stdio: 'inherit' });
  const srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: image, JAILBOX_ESCAPE_ABORT: 'none',
    JAILBOX_EXEC_MAX_TIMEOUT_S: '3600' }, { binary });
  const K = agentKit(srv);
  await K.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()), 120000);
  const run = async () => {
    const S = await K.openSession(copyTree, { mode: 'unsupervised', limits: { cpus: 2, memoryMiB: 2048, pids: 512 } });
    const agent = await K.connect(S.agentToken);
    const t = performance.now();
    const r = await K.call(agent, 'exec', { command: MAKE, writable: true, timeoutSec: 3600, maxOutputBytes: 65536 }, 3700000);
    const dt = performance.now() - t;
    const res = r.result?.structuredContent;
    if (!res || r.result.isError || res.exitCode !== 0 || !/0 fail\(s\)/.test(res.stdout))
      throw new Error(`${name}: exec make: ` + JSON.stringify(r).slice(0, 2000));
    agent.close();
    await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: srv.serviceToken, body: { reason: 'bench cleanup' } });
    return { dt, inJail: res.durationMs, changes: res.changesTotal };
  };
  return { name, srv, K, run, times: [] };
}

const sides = [await side('checked', JAILBOXD), await side('base', join(BASE, 'jailboxd'))];
try {
  for (let i = 0; i < rounds; i++) {
    for (const s of i % 2 === 0 ? sides : [...sides].reverse()) {
      const x = await s.run();
      s.times.push(x.dt);
      console.log(`round ${i + 1}: ${s.name} ${(x.dt / 1000).toFixed(1)} s (the command ${(x.inJail / 1000).toFixed(1)} s, ${x.changes} changes)`);
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const [a, b] = sides.map((s) => med(s.times));
  console.log(`libyaml ${MAKE}, writable exec, ${rounds} alternating rounds (${cpus().length} cores)`);
  console.log(`with the landing checks: median ${(a / 1000).toFixed(1)} s; base build (${BASE}): median ${(b / 1000).toFixed(1)} s`);
  console.log(`ratio checked / base ${(a / b).toFixed(3)}x (target <= 1.1x)`);
} finally {
  for (const s of sides) { s.K.closeSockets(); await s.srv.stop(); }
}
