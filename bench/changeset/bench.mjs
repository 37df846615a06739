// bench.mjs — bench/changeset/run.sh: what holding a command's effects for the buyer costs.
// 1. Applying a 200-file changeset: a supervised session, `sed -i` over 200 files of 4 KiB
//    through the agent's writable exec (on an overlay), all approved; the worker's time to
//    apply them on the host (its "changeset apply timings" log line: each file checked
//    against what it was, its pre-image row, written to a temporary name, fsynced and renamed;
//    the tree hashes before and after are printed apart) against `cp -a` of the same 200 new
//    files into a fresh folder, and `cp -a` + `sync -f`, alternating per round (target ≤ 3×
//    against cp -a).
// 2. The overlay's cost on a build: Debian's libyaml built with `make -j2 check` through a
//    writable exec in a supervised session (on the overlay; the changeset is then rejected)
//    against the same in an unsupervised session (the workspace bound as it is), alternating
//    per round; the command's own time in the jail (durationMs) compared (target ≤ 1.2×), the
//    changeset's build after the command printed apart.
// Usage: node bench.mjs [APPLY_ROUNDS [BUILD_ROUNDS]] (defaults 5 and 3; 0 skips).
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, JAILBOXD } from '../../tests/node/lib/server.mjs';
import { agentKit } from '../../tests/node/lib/agent.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const applyRounds = Number(process.argv[2] ?? 5);
const buildRounds = Number(process.argv[3] ?? 3);
const IMAGE = 'jailbox-sandbox-build:bench' + (process.env.JB_IMAGE_SUFFIX ?? '');
const FILES = 200;
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
  ['--userland', '--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', IMAGE], { stdio: 'inherit' });

const srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: IMAGE, JAILBOX_ESCAPE_ABORT: 'none',
  JAILBOX_EXEC_MAX_TIMEOUT_S: '3600' });
const K = agentKit(srv);

// Runs `command` writable in session S (its buyer approves the command line when asked, and
// then decides its changeset with `decide(ask)`, timed as `decideMs`); the exec's result and
// the call's time without the decision.
async function writable(S, command, decide) {
  const t = performance.now();
  const call = K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 3600, maxOutputBytes: 65536 }, 3700000);
  let decideMs = 0;
  if (S.buyer) {
    const ask = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.command === command, 60000);
    await S.buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: ask.opId });
    const cs = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.execOpId === ask.opId, 3700000);
    const d = performance.now();
    await decide(cs);
    decideMs = performance.now() - d;
  }
  const r = await call;
  const res = r.result?.structuredContent;
  if (!res || r.result.isError || res.exitCode !== 0) throw new Error(command + ': ' + JSON.stringify(r).slice(0, 2000));
  return { res, dt: performance.now() - t - decideMs };
}

async function session(build, mode) {
  const S = await K.openSession(build, { mode, limits: { cpus: 2, memoryMiB: 2048, pids: 512 } });
  S.agent = await K.connect(S.agentToken);
  if (mode === 'supervised') S.buyer = await K.connect(S.buyerToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  return S;
}

async function end(S) {
  S.agent.close();
  S.buyer?.close();
  await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: srv.serviceToken, body: { reason: 'bench cleanup' } });
}

const line = 'abcdefghijklmnopqrstuvwxyz0123456789 the quick brown fox jumps over the lazy dog\n';
const files = (d) => {
  mkdirSync(join(d, 'src'));
  for (let i = 0; i < FILES; i++) writeFileSync(join(d, 'src', `f${String(i).padStart(3, '0')}.txt`), line.repeat(50));
};

async function applyOnce() {
  const S = await session(files, 'supervised');
  await writable(S, "sed -i 's/quick/slow/' src/*.txt", async (cs) => {
    if (cs.total !== FILES) throw new Error('changeset: ' + JSON.stringify(cs));
    const ok = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${cs.opId}`, { token: S.buyerToken, body: {} });
    if (ok.status !== 200) throw new Error('approve: ' + ok.text);
  });
  const timing = await K.waitFor('apply timings', () => {
    const l = srv.log().split('\n').find((x) => x.includes('changeset apply timings') && x.includes(S.jobId));
    return l ? JSON.parse(l).timingsMs : null;
  }, 120000);
  // the baseline: the same 200 new files copied by cp -a (and then synced)
  const src = mkdtempSync(join(tmpdir(), 'jb-bench-cs-'));
  cpSync(join(S.dir, 'src'), join(src, 'src'), { recursive: true });
  await end(S);
  const cp = (sync) => {
    const dst = mkdtempSync(join(tmpdir(), 'jb-bench-cs-dst-'));
    const t = performance.now();
    execFileSync('cp', ['-a', join(src, 'src'), join(dst, 'src')]);
    if (sync) execFileSync('sync', ['-f', join(dst, 'src')]);
    const dt = performance.now() - t;
    rmSync(dst, { recursive: true, force: true });
    return dt;
  };
  const r = { apply: timing.apply, trees: timing.treeBefore + timing.treeAfter, cp: cp(false), cpSync: cp(true) };
  rmSync(src, { recursive: true, force: true });
  return r;
}

async function buildOnce(mode, SRC, MK) {
  const S = await session((d) => { cpSync(SRC, d, { recursive: true }); copyFileSync(MK, join(d, 'jailbox-bench.mk')); }, mode);
  let files;
  const { res, dt } = await writable(S, 'make -f jailbox-bench.mk -j2 check', async (cs) => {
    files = cs.total;
    await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${cs.opId}`, { token: S.buyerToken, body: { reason: 'bench' } });
  });
  if (!/0 fail\(s\)/.test(res.stdout)) throw new Error('make: ' + res.stdout.slice(-2000));
  await end(S);
  return { inJail: res.durationMs, call: dt, files };
}

try {
  await K.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()), 120000);
  const load = () => execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ');
  if (applyRounds > 0) {
    const xs = [];
    for (let i = 0; i < applyRounds; i++) {
      const x = await applyOnce();
      xs.push(x);
      console.log(`round ${i + 1}: apply ${x.apply.toFixed(1)} ms (tree hashes ${x.trees.toFixed(1)} ms) | cp -a ${x.cp.toFixed(1)} ms | cp -a + sync -f ${x.cpSync.toFixed(1)} ms`);
    }
    const a = med(xs.map((x) => x.apply)), c = med(xs.map((x) => x.cp)), cs = med(xs.map((x) => x.cpSync));
    console.log(`${FILES}-file changeset, ${applyRounds} rounds (${cpus().length} cores, load ${load()})`);
    console.log(`apply median ${a.toFixed(1)} ms; cp -a ${c.toFixed(1)} ms; cp -a + sync -f ${cs.toFixed(1)} ms`);
    console.log(`ratio apply / cp -a ${(a / c).toFixed(2)}x (target <= 3x); apply / (cp -a + sync -f) ${(a / cs).toFixed(2)}x`);
    console.log(`tree hashes before and after (not in the apply figure): median ${med(xs.map((x) => x.trees)).toFixed(1)} ms`);
  }
  if (buildRounds > 0) {
    const SRC = execFileSync(join(ROOT, 'deploy/demo-source.sh'), ['libyaml', join(ROOT, 'var/demo-src')]).toString().trim();
    const MK = join(ROOT, 'bench/exec/libyaml.mk');
    const on = [], off = [];
    for (let i = 0; i < buildRounds; i++) {
      for (const mode of i % 2 === 0 ? ['supervised', 'unsupervised'] : ['unsupervised', 'supervised']) {
        const x = await buildOnce(mode, SRC, MK);
        (mode === 'supervised' ? on : off).push(x);
        console.log(`round ${i + 1}: ${mode === 'supervised' ? 'overlay' : 'no overlay'}: make ${(x.inJail / 1000).toFixed(2)} s in the jail, the call ${(x.call / 1000).toFixed(2)} s${x.files ? `, changeset of ${x.files} files` : ''}`);
      }
    }
    const m1 = med(on.map((x) => x.inJail)), m0 = med(off.map((x) => x.inJail));
    console.log(`libyaml make -j2 check, ${buildRounds} alternating rounds (load ${load()})`);
    console.log(`in the jail: overlay median ${(m1 / 1000).toFixed(2)} s, without ${(m0 / 1000).toFixed(2)} s: ratio ${(m1 / m0).toFixed(3)}x (target <= 1.2x)`);
    const c1 = med(on.map((x) => x.call - x.inJail)), c0 = med(off.map((x) => x.call - x.inJail));
    console.log(`around the command (the command's approval, the changeset's build, or the effects walk; not the buyer's decision): overlay ${(c1 / 1000).toFixed(2)} s, without ${(c0 / 1000).toFixed(2)} s`);
  }
} finally {
  K.closeSockets();
  await srv.stop();
}
