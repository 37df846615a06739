// exec_checks.test.mjs — the walls checked from inside, by a program the agent runs: an agent
// (the official MCP SDK client over Streamable HTTP) in an unsupervised session on the build
// image (build.sh --userland, cached under var/sandbox-image/) writes a C probe
// (fixtures/walls_probe.c) with the `write` tool, compiles it inside the walls with
// `exec gcc` (writable), and execs it once per check, each with its expected failure read
// from the tool's structured result: loopback only (AF_INET allowed, nothing routed out, AF_UNIX
// allowed, no interface but lo),
// no capability, no_new_privs, read-only root, /usr and (unless writable) workspace, the
// uncommon syscalls failing with an errno, its own /proc, no /sys to write, no inherited
// descriptor, the process limit, gVisor as the kernel; the escape-shaped calls (mount, ptrace, unshare, bpf, keyctl, TIOCSTI) each
// in a fresh session with the probe, killed with SIGSYS, a seccomp_kill signal that aborts
// the session (the default JAILBOX_ESCAPE_ABORT); a memory hog that takes the whole sandbox over
// its limit reported as oom, not as an escape (the worker sends commands no memory limit here,
// JB_TEST_EXEC_MEMORY_UNWATCHED: the spawner's per-command watch is exec_memory.test.mjs's).
// Needs root, Docker with runsc, debootstrap and deb.debian.org for the first --userland build.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startServer, JAILBOXD } from './lib/server.mjs';
import { ROOT } from './lib/jail.mjs';
import { agentKit } from './lib/agent.mjs';
import { connectClient } from './lib/mcp.mjs';

const BUILD = 'jailbox-sandbox-build:checks' + (process.env.JB_IMAGE_SUFFIX ?? '');
const PROBE = readFileSync(new URL('./fixtures/walls_probe.c', import.meta.url), 'utf8');

let K, srv;
let A, client; // the session that compiles the probe and runs the checks that do not end it
const clients = [];

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  const t0 = Date.now();
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--userland', '--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', BUILD], { stdio: 'inherit' });
  console.log(`# build.sh --userland took ${Date.now() - t0} ms`);
  srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: BUILD, JAILBOX_SANDBOX_IMAGES: BUILD,
    JB_TEST_EXEC_MEMORY_UNWATCHED: '1' });
  K = agentKit(srv);
  await K.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()));
  A = await K.openSession(() => {}, { mode: 'unsupervised', image: BUILD, limits: { pids: 64 } });
  client = await agent(A);
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

async function agent(S) {
  const c = await connectClient('http', K, S, 'exec-checks');
  clients.push(c);
  return c;
}

// the tool's answer: structuredContent, asserted not to be an error
async function run(c, args) {
  const r = await c.callTool({ name: 'exec', arguments: args }, undefined, { timeout: 120000 });
  assert.ok(!r.isError, `exec ${JSON.stringify(args)}: ${JSON.stringify(r).slice(0, 1500)}`);
  return r.structuredContent;
}

// the probe run as `./probe mode` in session A (read-only workspace): its one stdout line as words
async function probe(mode, more = {}) {
  const r = await run(client, { argv: ['./probe', mode], timeoutSec: 30, ...more });
  assert.equal(r.exitCode, 0, `probe ${mode}: ${JSON.stringify(r)}`);
  assert.equal(r.signal, null);
  const line = r.stdout.trim();
  const w = line.split(/\s+/);
  const kv = {};
  for (let i = 0; i + 1 < w.length; i += 2) kv[w[i]] = w[i + 1];
  return { r, line, kv };
}

test('the agent writes the probe and compiles it inside the walls with exec gcc', async () => {
  const w = await client.callTool({ name: 'write', arguments: { path: 'probe.c', content: PROBE } });
  assert.ok(!w.isError, JSON.stringify(w));
  const t = Date.now();
  const r = await run(client, { argv: ['gcc', '-O2', '-Wall', '-o', 'probe', 'probe.c'], writable: true, timeoutSec: 120 });
  console.log(`# exec gcc took ${Date.now() - t} ms (durationMs ${r.durationMs})`);
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stderr, '', 'no warning');
  const added = r.changes.find((x) => x.path === 'probe');
  assert.equal(added.change, 'added', JSON.stringify(r.changes));
  assert.ok(statSync(join(A.dir, 'probe')).mode & 0o100, 'executable on the host side too');
});

test('network: AF_INET allowed but nothing outside reached, netlink and packet sockets refused (EPERM), AF_UNIX allowed, no interface but lo', async () => {
  const { kv, line } = await probe('net');
  console.log('# net:', line);
  // Wall 2's profile allows AF_UNIX and TCP/UDP sockets; the command's own network namespace
  // has only lo and runsc --network=none routes nothing out (tests/node/loopback.test.mjs)
  assert.equal(kv.inet, 'ok', line);
  assert.match(kv.connect, /^E(HOST|NET)UNREACH$/, line);
  assert.match(kv.sendto, /^E(HOST|NET)UNREACH$/, line);
  assert.equal(kv.unix, 'ok', 'local sockets are allowed: ' + line);
  assert.equal(kv.netlink, 'EPERM', line);
  assert.equal(kv.packet, 'EPERM', line);
  assert.match(line, / interfaces lo$/, 'loopback only: ' + line);
  assert.match((await K.sessionOf(A.jobId)).walls.exec.jail.network, /^loopback only/);
});

test('privileges: uid 65534, CapEff/CapPrm/CapBnd/CapAmb zero, no_new_privs 1, seccomp filter on, setuid(0) refused', async () => {
  const { kv, line } = await probe('privs');
  assert.equal(kv.uid, '65534', line);
  assert.equal(kv.euid, '65534', line);
  assert.equal(kv.gid, '65534', line);
  for (const cap of ['CapEff', 'CapPrm', 'CapBnd']) assert.equal(kv[cap], '0000000000000000', `${cap}: ${line}`);
  // gVisor's status has no CapAmb line; where it has, it must be empty
  if (kv.CapAmb !== 'absent') assert.equal(kv.CapAmb, '0000000000000000', line);
  // gVisor's status has no NoNewPrivs line (sandbox/WALLS.md); prctl says it
  if (kv.NoNewPrivs !== 'absent') assert.equal(kv.NoNewPrivs, '1', line);
  assert.equal(kv.nnp, '1', line);
  assert.equal(kv.seccomp, '2', line);
  assert.equal(kv.setuid0, 'EPERM', line);
});

test('file system: root, /usr, /etc and the workspace read-only mounts (EROFS); /tmp its own; writable opens the workspace only', async () => {
  let { kv, line } = await probe('fs');
  console.log('# fs:', line);
  // uid 65534 may meet the permission check (EACCES) before the mount's; the mounts' flags say ro
  for (const d of ['root', 'usr', 'etc', 'workspace']) assert.match(kv[d], /^(EROFS|EACCES)$/, `${d}: ${line}`);
  assert.equal(kv.workspace, 'EROFS', line);
  for (const d of ['/', '/usr', '/etc/passwd', '/workspace']) assert.match(line, new RegExp(` ${d}:ro( |$)`), `${d}: ${line}`);
  assert.match(line, / \/tmp:rw/, line);
  assert.equal(kv.tmp, 'ok', line);
  assert.match(kv.passwd, /^(EROFS|EACCES)$/, line);
  ({ kv, line } = await probe('fs', { writable: true }));
  assert.equal(kv.workspace, 'ok', line);
  assert.match(line, / \/workspace:rw /, line);
  assert.match(line, / \/usr:ro /, line);
  assert.match(kv.usr, /^(EROFS|EACCES)$/, line);
});

test('/proc: the command\'s own pid namespace — a few small pids, no shim, spawner or runtime process', async () => {
  const { kv, line, r } = await probe('proc');
  console.log('# proc:', line, JSON.stringify(r.stderr));
  assert.equal(kv.shim, '0', line + '\n' + r.stderr);
  assert.ok(Number(kv.pids) >= 1 && Number(kv.pids) <= 6, line);
  assert.ok(Number(kv.max) < 20 && Number(kv.self) < 20, line);
});

test('/sys: nothing to write (absent or read-only, minimal)', async () => {
  const { kv, line } = await probe('sys');
  if (kv.sys === 'present') assert.ok(Number(kv.entries) <= 12, line);
  else assert.equal(kv.sys, 'ENOENT', line);
  assert.match(kv.uevent_helper, /^(ENOENT|EROFS|EACCES|EPERM)$/, line);
  assert.match(kv.create, /^(ENOENT|EROFS|EACCES|EPERM)$/, line);
});

test('descriptors: only 0, 1 and 2 are inherited', async () => {
  const { line } = await probe('fds');
  assert.equal(line, 'fds 0 1 2');
});

test('uncommon syscalls fail with an errno, the command goes on', async () => {
  const { kv, line } = await probe('uncommon');
  for (const c of ['sethostname', 'syslog', 'acct', 'chroot', 'personality']) assert.equal(kv[c], 'EPERM', `${c}: ${line}`);
  assert.equal(kv.clone3, 'ENOSYS', line);
  assert.equal(kv.io_uring_setup, 'ENOSYS', line);
});

test('process limit: a fork bomb stops at EAGAIN below the session\'s pids and ends with a result', async () => {
  const t = Date.now();
  const { kv, line, r } = await probe('pids');
  assert.equal(kv.then, 'EAGAIN', line);
  assert.ok(Number(kv.forks) > 0 && Number(kv.forks) < 64, line);
  assert.equal(r.timedOut, false);
  console.log(`# fork bomb: ${line}, ${Date.now() - t} ms`);
  // and the session still runs commands
  assert.equal((await probe('fds')).line, 'fds 0 1 2');
});

test('runtime: the kernel the command sees is gVisor\'s, as the contract says, not the host\'s', async () => {
  const { line } = await probe('runtime');
  const host = readFileSync('/proc/version', 'utf8').trim();
  assert.notEqual(line, host);
  const st = await K.sessionOf(A.jobId);
  assert.equal(st.walls.walls.gvisor.up, true);
  const seen = st.walls.walls.gvisor.kernelSeenInside;
  assert.ok(seen, JSON.stringify(st.walls.walls.gvisor));
  assert.ok(line.includes(seen) || seen.includes(line.split(' ')[2]), `${line} vs ${seen}`);
  // the contract says these checks exist
  assert.match(st.walls.exec.checksFromInside, /exec_checks\.test\.mjs/);
});

// a fresh session with the compiled probe in its workspace, and its agent
async function freshSession(limits = {}) {
  const S = await K.openSession((d) => copyFileSync(join(A.dir, 'probe'), join(d, 'probe')),
    { mode: 'unsupervised', image: BUILD, limits });
  return { S, c: await agent(S) };
}

for (const call of ['mount', 'ptrace', 'unshare', 'bpf', 'keyctl', 'tiocsti']) {
  test(`escape-shaped ${call}: SIGSYS kills the command, a seccomp_kill signal aborts the session`, async () => {
    const { S, c } = await freshSession();
    const r = await c.callTool({ name: 'exec', arguments: { argv: ['./probe', call], timeoutSec: 30 } });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.equal(r.structuredContent.error.reason, 'denied', JSON.stringify(r));
    // (gVisor does not tell which call: the message says "a forbidden system call")
    assert.match(r.content[0].text, /killed by the sandbox's syscall filter/, JSON.stringify(r));
    const st = await K.waitFor('aborted', async () => {
      const x = await K.sessionOf(S.jobId);
      return x.state === 'aborted' ? x : null;
    }, 20000);
    assert.equal(st.stateReason, 'escape_detected');
    const al = await srv.req('GET', `/v1/jailbox/${S.jobId}/alerts`, { token: srv.serviceToken });
    const a = al.json.alerts.find((x) => x.kind === 'seccomp_kill');
    assert.ok(a && a.escape, JSON.stringify(al.json));
    assert.match(a.detail, /exec killed by the syscall filter/, JSON.stringify(a));
    // the escape's second step seals the chain, right after the abort
    const v = await K.waitFor('sealed', async () => {
      const x = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit/verify`, { token: srv.serviceToken });
      return x.json.sealed ? x : null;
    }, 15000);
    assert.equal(v.json.ok, true, v.text);
    const e = (await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: srv.serviceToken })).text
      .trim().split('\n').map((l) => JSON.parse(l)).find((x) => x.operation === 'exec');
    // the command's outcome is in the chain, before the abort it caused
    assert.equal(e.details.error, 'seccomp', JSON.stringify(e));
    assert.equal(e.details.signal, 'SIGSYS', JSON.stringify(e));
    const ops = (await srv.db.query('SELECT state, result FROM ops WHERE job_id = $1 AND tool = \'exec\'', [S.jobId])).rows;
    assert.equal(ops.length, 1);
    assert.equal(ops[0].state, 'failed');
    assert.equal(ops[0].result.error.code, 'seccomp', JSON.stringify(ops));
  });
}

test('a memory hog over the session\'s limit is reported as oom', async () => {
  const { S, c } = await freshSession({ memoryMiB: 256 });
  const t = Date.now();
  const r = await c.callTool({ name: 'exec', arguments: { argv: ['./probe', 'memhog'], timeoutSec: 60 } }, undefined, { timeout: 120000 });
  console.log(`# memhog: ${JSON.stringify(r).slice(0, 600)} after ${Date.now() - t} ms; session`, (await K.sessionOf(S.jobId)).state);
  assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(r.structuredContent.oom, true, JSON.stringify(r));
  assert.notEqual(r.structuredContent.exitCode, 0);
  // the op holds that outcome; the sandbox went over its limit, so the session ends, saying why
  const ops = (await srv.db.query("SELECT state, result FROM ops WHERE job_id = $1 AND tool = 'exec'", [S.jobId])).rows;
  assert.equal(ops[0].state, 'done', JSON.stringify(ops));
  assert.equal(ops[0].result.result.oom, true, JSON.stringify(ops));
  const st = await K.waitFor('failed', async () => {
    const x = await K.sessionOf(S.jobId);
    return x.state === 'failed' ? x : null;
  }, 20000);
  assert.match(st.stateReason, /out of memory/);
  // not an escape: no escape alert; the worker found the container's memory cgroup and, where
  // the kernel's OOM notification could be registered (no "no OOM notification" line), knew
  // the OOM from it, with the kill counted when it came (the log says how it was known:
  // event, sample or docker)
  const al = await srv.req('GET', `/v1/jailbox/${S.jobId}/alerts`, { token: srv.serviceToken });
  assert.deepEqual(al.json.alerts.filter((a) => a.escape), [], JSON.stringify(al.json));
  const ended = srv.log().split('\n').filter((l) => l.includes(S.jobId) && l.includes('"msg":"sandbox ended"'));
  assert.equal(ended.length, 1, srv.log().slice(-3000));
  const { memcgOomKills: kills, oomKnownFrom: from, oomKnownMsBeforeEnd: lead, reason } = JSON.parse(ended[0]);
  console.log(`# memhog: OOM known from: ${from} (${lead} ms before Docker reported the end); the memory cgroup counted ${kills} OOM kill(s); ${reason}`);
  const mine = (what) => new RegExp(`${what}[^\n]*${S.jobId}|${S.jobId}[^\n]*${what}`);
  assert.doesNotMatch(srv.log(), mine('memory cgroup not found'));
  if (mine('no OOM notification').test(srv.log())) {
    assert.ok(['sample', 'docker'].includes(from), ended[0]);
  } else {
    assert.equal(from, 'event', ended[0]);
    assert.ok(Number(kills) >= 1, ended[0]);
  }
});
