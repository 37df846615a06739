// exec_memory.test.mjs — memory per command: in a session of 256 MiB (the container's limit) a
// command that allocates twice that ends with oom: true — the spawner's watch on the jail's
// memory cgroup kills it at the per-command limit, before the host's OOM killer would end the
// whole sandbox — and the session goes on: the next command and the file tools work. The
// contract says the limit (exec.memory); a command under it is not killed; several processes
// of one command are counted together; an exec's memoryMiB lowers the limit and never raises
// it; the audit entry and the buyer's jailbox:op say oom with the limit and the peak seen; in the smallest session
// (64 MiB) four processes racing past a 16 MiB limit end oom and the sandbox lives. Needs root, Docker with runsc;
// the image gets a static allocator (fixtures/memhog.c, compiled here with gcc -static).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:execmem';
const SESSION_MIB = 256;

let K, srv, U, agent, buyer;

before(async () => {
  const hog = join(mkdtempSync(join(tmpdir(), 'jb-memhog-')), 'memhog');
  execFileSync('gcc', ['-O2', '-static', '-o', hog, fileURLToPath(new URL('./fixtures/memhog.c', import.meta.url))]);
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none' }, [`${hog}:/usr/bin/memhog`, '/usr/bin/ls', `${realpathSync('/bin/sh')}:/bin/sh`]);
  srv = K.srv;
  U = await K.openSession((d) => writeFileSync(join(d, 'hello.txt'), 'hello\n'),
    { mode: 'unsupervised', limits: { memoryMiB: SESSION_MIB } });
  agent = await K.connect(U.agentToken);
  buyer = await K.connect(U.buyerToken);
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// exec's structured result, asserted not to be a failure
async function exec(args) {
  const r = await K.call(agent, 'exec', { timeoutSec: 60, ...args }, 120000);
  assert.ok(!toolFailure(r), `exec ${JSON.stringify(args)}: ${JSON.stringify(r).slice(0, 1500)}`);
  return r.result.structuredContent;
}

async function stillActive() {
  const s = await K.sessionOf(U.jobId);
  assert.equal(s.state, 'active', `${s.state}: ${s.stateReason}`);
  return s;
}

test('the contract gives each command a memory limit below the container\'s', async () => {
  const s = await K.sessionOf(U.jobId);
  const m = s.walls?.exec?.memory;
  assert.ok(m, JSON.stringify(s.walls?.exec).slice(0, 800));
  // 256 MiB less max(64 MiB, an eighth)
  assert.equal(m.perCommandMiB, SESSION_MIB - 64, JSON.stringify(m));
  assert.equal(m.containerMiB, SESSION_MIB);
  assert.equal(m.enforced, true, JSON.stringify(m));
  assert.equal(m.watch, 'cgroup');
  assert.ok(m.intervalMs > 0 && m.intervalMs <= 100, JSON.stringify(m));
});

test('a command that allocates twice the session\'s memory ends with oom; the session goes on', async () => {
  const t = Date.now();
  const r = await exec({ argv: ['memhog', String(2 * SESSION_MIB)] });
  console.log(`# memhog ${2 * SESSION_MIB}: ${JSON.stringify({ ...r, stdout: undefined })} in ${Date.now() - t} ms`);
  assert.equal(r.oom, true, JSON.stringify(r));
  assert.equal(r.signal, 'SIGKILL');
  assert.equal(r.exitCode, null);
  assert.equal(r.timedOut, false);
  assert.doesNotMatch(r.stdout, /held/);
  // the buyer's live view ends with the same word
  const end = await K.waitEvent(buyer, 'jailbox:op', (p) => p.tool === 'exec' && p.state === 'done', 5000);
  assert.equal(end.result.oom, true, JSON.stringify(end));
  await stillActive();
  // the next command runs, and the file tools work
  const n = await exec({ argv: ['memhog', '16'] });
  assert.equal(n.exitCode, 0, JSON.stringify(n));
  assert.equal(n.stdout, 'held 16\n');
  assert.equal(n.oom, false);
  await K.ok(agent, 'write', { path: 'after-oom.txt', content: 'still here\n' });
  const rd = await K.ok(agent, 'read', { path: 'after-oom.txt' });
  assert.match(JSON.stringify(rd), /still here/);
  assert.match(JSON.stringify(await K.ok(agent, 'list', { path: '.' })), /hello\.txt/);
  // the audit entry: oom, the limit and the peak the watch saw (over the limit, under the container's)
  const ex = await srv.req('GET', `/v1/jailbox/${U.jobId}/audit`, { token: srv.serviceToken });
  const e = ex.text.trim().split('\n').map((l) => JSON.parse(l))
    .find((x) => x.operation === 'exec' && x.details.argv?.[1] === String(2 * SESSION_MIB));
  assert.ok(e, ex.text.slice(-2000));
  assert.equal(e.details.oom, true, JSON.stringify(e.details));
  assert.equal(e.details.memory.limitBytes, (SESSION_MIB - 64) * 1048576);
  assert.ok(e.details.memory.peakBytes > e.details.memory.limitBytes, JSON.stringify(e.details.memory));
  assert.ok(e.details.memory.peakBytes < SESSION_MIB * 1048576, JSON.stringify(e.details.memory));
  console.log(`# peak seen ${(e.details.memory.peakBytes / 1048576).toFixed(1)} MiB against a limit of ${SESSION_MIB - 64} MiB`);
});

test('a command under its limit is not killed; the processes of one command count together', async () => {
  const r = await exec({ argv: ['memhog', '120'] });
  assert.equal(r.exitCode, 0, JSON.stringify(r));
  assert.equal(r.oom, false);
  assert.equal(r.stdout, 'held 120\n');
  // three processes of 100 MiB each: each under the limit, together over it
  const t = await exec({ argv: ['memhog', '100', '3'] });
  assert.equal(t.oom, true, JSON.stringify(t));
  await stillActive();
});

test('an exec\'s memoryMiB lowers the limit and never raises it', async () => {
  const low = await exec({ argv: ['memhog', '120'], memoryMiB: 64 });
  assert.equal(low.oom, true, JSON.stringify(low));
  const high = await exec({ argv: ['memhog', '300'], memoryMiB: 4096 });
  assert.equal(high.oom, true, JSON.stringify(high));
  const f = toolFailure(await K.call(agent, 'exec', { argv: ['memhog', '1'], memoryMiB: 8 }));
  assert.ok(f, 'memoryMiB under 16 is refused');
  assert.match(f.message, /memoryMiB/);
  const ok = await exec({ argv: ['memhog', '8'] });
  assert.equal(ok.exitCode, 0, JSON.stringify(ok));
  await stillActive();
  // the sandbox was never killed: one container all along, no OOM end
  assert.doesNotMatch(srv.log(), new RegExp(`"msg":"sandbox ended"[^\\n]*${U.jobId}|${U.jobId}[^\\n]*"msg":"sandbox ended"`));
});

test('the smallest session (64 MiB): 16 MiB a command, and four processes racing past it end oom', async () => {
  const S = await K.openSession(() => {}, { mode: 'unsupervised', limits: { memoryMiB: 64 } });
  assert.equal((await K.sessionOf(S.jobId)).walls.exec.memory.perCommandMiB, 16);
  const a = await K.connect(S.agentToken);
  const r = (await K.call(a, 'exec', { argv: ['memhog', '400', '4'], timeoutSec: 60 }, 120000)).result?.structuredContent;
  assert.equal(r?.oom, true, JSON.stringify(r));
  const n = await K.ok(a, 'exec', { argv: ['memhog', '8'] });
  assert.equal(n.exitCode, 0, JSON.stringify(n));
  const st = await K.sessionOf(S.jobId);
  assert.equal(st.state, 'active', st.stateReason);
});

test('the jails\' memory cgroups go with their jails', async () => {
  // seen from the container (gVisor's cgroupfs, as the spawner sees it): after the commands
  // above, the jail built ahead's cgroup and at most one of a jail still ending
  const cid = (await K.sessionOf(U.jobId)).walls.walls.docker.containerId;
  await new Promise((r) => setTimeout(r, 500));
  const left = execFileSync('docker', ['exec', cid, '/usr/bin/ls', '/sys/fs/cgroup/memory']).toString()
    .split('\n').filter((n) => n.startsWith('jailbox-jail-'));
  console.log(`# memory cgroups of jails in the container: ${left.join(' ')}`);
  assert.ok(left.length >= 1 && left.length <= 2, left.join(' '));
});
