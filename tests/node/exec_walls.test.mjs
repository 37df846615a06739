// exec_walls.test.mjs — exec's spawner and per-command jail inside the real walls (gVisor,
// Docker, bwrap, exec's seccomp filter), driven over the worker's control socket (op exec,
// exec_signal): exit codes and output, the walls seen from inside a command, the limits
// (timeout of a whole tree, output caps, a fork bomb), kill and stop/cont, and that the shim
// keeps answering while a command runs. The image gets /bin/sh, a few coreutils and a small
// static probe compiled here. Needs root, Docker with runsc (deploy/start-dockerd.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startJail, openSession, control } from './lib/jail.mjs';

const PROBE_C = String.raw`
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <errno.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  if (!strcmp(m, "mount")) { mount("none", "/tmp", "tmpfs", 0, NULL); puts("mount returned"); return 0; }
  if (!strcmp(m, "ptrace")) { ptrace(PTRACE_TRACEME, 0, 0, 0); puts("ptrace returned"); return 0; }
  if (!strcmp(m, "unshare")) { unshare(CLONE_NEWUSER); puts("unshare returned"); return 0; }
  if (!strcmp(m, "netlink")) { int s = socket(AF_NETLINK, SOCK_RAW, 0); printf("%d\n", s); return 0; }
  if (!strcmp(m, "forkbomb")) { for (;;) fork(); }
  if (!strcmp(m, "ignoreterm")) { signal(SIGTERM, SIG_IGN); for (;;) pause(); }
  if (!strcmp(m, "daemon")) {
    if (fork() == 0) { setsid(); if (fork() == 0) { for (;;) pause(); } _exit(0); }
    for (;;) pause();
  }
  if (!strcmp(m, "abind") || !strcmp(m, "aconn")) {
    /* an abstract Unix socket: bound by one command, looked for by the next */
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, "jbwarm", 6);
    socklen_t l = (socklen_t)(sizeof(sa_family_t) + 7);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (m[1] == 'b') {
      if (bind(fd, (struct sockaddr *)&a, l) < 0 || listen(fd, 8) < 0) { printf("bind %d\n", errno); return 1; }
      if (fork() == 0) { setsid(); for (;;) { int c = accept(fd, 0, 0); if (c >= 0) { if (write(c, "hi", 2) < 0) {} close(c); } } }
      puts("bound"); return 0;
    }
    if (connect(fd, (struct sockaddr *)&a, l) < 0) { printf("connect %d\n", errno); return 0; }
    puts("connected"); return 0;
  }
  if (!strcmp(m, "closeout")) { close(1); close(2); for (;;) pause(); }
  if (!strcmp(m, "spew")) { char b[65536]; memset(b, 'y', sizeof b); for (;;) if (write(1, b, sizeof b) < 0) return 3; }
  if (!strcmp(m, "bytes")) { static const char b[] = {0, (char)0xff, (char)0xfe, 'a', 0, '\n'}; fwrite(b, 1, sizeof b, stdout); return 0; }
  if (!strcmp(m, "lines")) { for (int i = 0; i < 10000; i++) printf("line %d\n", i); return 0; }
  if (!strcmp(m, "exit")) return atoi(argv[2]);
  if (!strcmp(m, "nnp")) { printf("%d %d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), prctl(PR_GET_SECCOMP, 0, 0, 0, 0)); return 0; }
  if (!strcmp(m, "fds")) {
    DIR *d = opendir("/proc/self/fd"); struct dirent *e;
    while ((e = readdir(d))) if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) printf("%s ", e->d_name);
    puts(""); return 0;
  }
  if (!strcmp(m, "memhog")) { for (;;) { char *p = malloc(16 << 20); if (!p) return 4; memset(p, 1, 16 << 20); } }
  if (!strcmp(m, "err")) { fputs("to stderr\n", stderr); puts("to stdout"); return 7; }
  return 99;
}`;

let srv, s, bin, extra;
before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'jbexec-'));
  writeFileSync(join(dir, 'probe.c'), PROBE_C);
  bin = join(dir, 'probe');
  execFileSync('gcc', ['-O2', '-static', '-o', bin, join(dir, 'probe.c')]);
  const sh = execFileSync('readlink', ['-f', '/bin/sh']).toString().trim();
  extra = [`${sh}:/bin/sh`, '/usr/bin/cat', '/usr/bin/ls', '/usr/bin/sleep', '/usr/bin/id',
    '/usr/bin/true', '/usr/bin/touch', '/usr/bin/yes', '/usr/bin/head', `${bin}:/usr/bin/probe`];
  srv = await startJail({ image: 'jailbox-sandbox:exec', env: { JAILBOX_ESCAPE_ABORT: 'none' }, extra });
  s = await openSession(srv, (d) => {
    writeFileSync(join(d, 'hello.txt'), 'hello\n');
    mkdirSync(join(d, 'sub'));
  });
});
after(async () => {
  await srv?.stop();
  // a sanitizer build (JAILBOXD=build-asan/jailboxd) reports into the log the worker shares
  assert.doesNotMatch(srv?.log() ?? '', /AddressSanitizer|LeakSanitizer|runtime error:/);
});

const b64 = (t) => Buffer.from(t).toString('base64');
async function exec(argv, extra = {}) {
  const t = Date.now();
  const r = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv, timeoutMs: 20000, ...extra }, 60000);
  assert.ok(r.ok, JSON.stringify(r));
  r.out = Buffer.from(r.stdout, 'base64');
  r.err = Buffer.from(r.stderr, 'base64');
  r.wall = Date.now() - t;
  return r;
}
const shim = (request) => control(srv.ctl, { jobId: s.jobId, request, timeoutMs: 10000 }, 20000);

test('the contract says exec is available, with its jail and filter', async () => {
  const st = await srv.req('GET', '/v1/jailbox/' + s.jobId, { token: srv.serviceToken });
  const ex = st.json.walls.exec;
  assert.equal(ex.available, true, JSON.stringify(ex));
  assert.equal(ex.jail.uid, 65534);
  assert.match(ex.filter.bpfSha256, /^[0-9a-f]{64}$/);
  assert.ok(ex.filter.killRules > 20, JSON.stringify(ex.filter));
  assert.ok(ex.filter.filter.kill.includes('mount'));
  assert.ok(ex.jail.imageBinds.includes('/usr'));
});

test('exit codes, stdout and stderr, stdin, env, cwd', async () => {
  let r = await exec(['/usr/bin/true']);
  assert.equal(r.result.exitCode, 0);
  assert.equal(r.result.signal, null);
  console.log('exec true: durationMs', r.result.durationMs, 'round trip ms', r.wall);
  r = await exec(['probe', 'err']);
  assert.equal(r.result.exitCode, 7);
  assert.equal(r.out.toString(), 'to stdout\n');
  assert.equal(r.err.toString(), 'to stderr\n');
  assert.equal(r.result.stdoutBytes, 10);
  r = await exec(['probe', 'exit', '3']);
  assert.equal(r.result.exitCode, 3);
  r = await exec(['cat'], { stdin: b64('from stdin') });
  assert.equal(r.out.toString(), 'from stdin');
  r = await exec(['/bin/sh', '-c', 'echo "$FOO $HOME $LANG $TERM"; pwd'], { env: { FOO: 'bar' }, cwd: 'sub' });
  assert.equal(r.out.toString(), 'bar /tmp C.UTF-8 dumb\n/workspace/sub\n');
  r = await exec(['probe', 'bytes']);
  assert.deepEqual([...r.out], [0, 0xff, 0xfe, 0x61, 0, 0x0a]);
  r = await exec(['no-such-program']);
  assert.equal(r.result.exitCode, 127);
  // refused before anything runs
  let x = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv: ['true'], cwd: '../etc' });
  assert.equal(x.ok, false);
  assert.match(x.error, /bad_cwd/);
  x = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv: ['true'], env: { LD_PRELOAD: '/tmp/x' } });
  assert.equal(x.ok, false);
  assert.match(x.error, /bad_request/);
});

test('the walls from inside a command', async () => {
  const r = await exec(['/bin/sh', '-c',
    'id -u; id -g; cat /proc/self/status; echo PIDS; ls /proc | while read p; do case $p in [0-9]*) echo $p;; esac; done']);
  const out = r.out.toString();
  const [uid, gid] = out.split('\n');
  assert.equal(uid, '65534');
  assert.equal(gid, '65534');
  assert.match(out, /CapEff:\s+0000000000000000/);
  assert.match(out, /CapPrm:\s+0000000000000000/);
  assert.match(out, /CapBnd:\s+0000000000000000/);
  assert.match(out, /Seccomp:\s+2/);
  // gVisor has no NoNewPrivs line (sandbox/WALLS.md); where it has, it must say 1
  if (/NoNewPrivs/.test(out)) assert.match(out, /NoNewPrivs:\s+1/);
  assert.equal((await exec(['probe', 'nnp'])).out.toString(), '1 2\n', 'no_new_privs 1, seccomp mode 2');
  assert.equal((await exec(['probe', 'fds'])).out.toString(), '0 1 2 \n', 'only stdio is inherited');
  const pids = out.split('PIDS\n')[1].trim().split('\n').map(Number);
  // the jail's pid 1 (bwrap's init), the shell, and what it runs: never the shim's
  // (and the helper that waits for the command as its parent in the session)
  assert.ok(pids.length <= 6 && pids.includes(1), JSON.stringify(pids));
  assert.ok(Math.max(...pids) < 20, JSON.stringify(pids));
});

test('workspace read-only unless writable; /tmp its own', async () => {
  let r = await exec(['touch', 'new.txt']);
  assert.notEqual(r.result.exitCode, 0);
  assert.equal(existsSync(join(s.dir, 'new.txt')), false);
  r = await exec(['touch', 'new.txt'], { writable: true });
  assert.equal(r.result.exitCode, 0, r.err.toString());
  assert.equal(existsSync(join(s.dir, 'new.txt')), true);
  r = await exec(['/bin/sh', '-c', 'echo x > /tmp/mine && ls /tmp']);
  assert.equal(r.out.toString(), 'mine\n');
  r = await exec(['ls', '/tmp']);
  assert.equal(r.out.toString(), '', 'a fresh /tmp per command');
  r = await exec(['/bin/sh', '-c', 'echo x > /etc/passwd']);
  assert.notEqual(r.result.exitCode, 0);
});

// The next command's jail is built ahead by the spawner (sandbox/WALLS.md, "exec"): a command
// that runs in it must find nothing of the command before — not its /tmp, not its processes —
// and the jail must be of the kind the command asked for.
const settle = () => new Promise((r) => setTimeout(r, 2500)); // time to build the jail ahead
const look = ['/bin/sh', '-c', 'ls -A /tmp; echo PIDS; for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm)"; done'];

test('the jail built ahead: a fresh /tmp, none of the last command\'s processes', async () => {
  // a command fills /tmp and leaves a daemon (double fork, setsid) and a background sleep
  let r = await exec(['/bin/sh', '-c', 'echo x > /tmp/left; echo y > /tmp/two; touch /tmp/.hidden; probe daemon & sleep 30 & ls -A /tmp']);
  assert.equal(r.out.toString(), '.hidden\nleft\ntwo\n');
  await settle();
  r = await exec(look);
  assert.equal(r.result.timingsMs?.warm, true, 'the command ran in the jail built ahead: ' + JSON.stringify(r.result));
  assert.equal(r.result.timingsMs.jailWait <= 50, true, JSON.stringify(r.result.timingsMs));
  const [tmp, procs] = r.out.toString().split('PIDS\n');
  assert.equal(tmp, '', 'a fresh, empty /tmp');
  const comms = procs.trim().split('\n').map((l) => l.split(' ')[1]);
  assert.ok(!comms.includes('probe') && !comms.includes('sleep'), 'nothing of the last command: ' + procs);
  // the same processes as in a jail built for the command: bwrap's init, the helper, the shell
  // (and the cat it runs)
  assert.deepEqual(comms.filter((c) => c !== 'cat').sort(), ['bwrap', 'jailbox-shim', 'sh'], procs);
  // and the same environment
  r = await exec(['/bin/sh', '-c', 'echo "$HOME|$LANG|$PATH|$TERM"; export -p'], { env: { ONLY: 'this' } });
  const [vals, ...exported] = r.out.toString().trim().split('\n');
  assert.equal(vals, '/tmp|C.UTF-8|/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin|dumb');
  const names = exported.map((l) => l.replace(/^export /, '').split('=')[0]).filter((n) => n !== 'PWD' && n !== 'OLDPWD');
  assert.deepEqual(names.sort(), ['HOME', 'LANG', 'ONLY', 'PATH', 'TERM'], r.out.toString());
});

test('the jail built ahead is of the kind asked for: read-only and writable each enforced', async () => {
  const kinds = [
    [false, null], // read-only after read-only: the jail ahead
    [true, false], // writable after read-only: built for it
    [true, true], // writable again: the jail ahead is writable
    [false, false], // read-only after writable: built for it, read-only
    [false, true],
  ];
  for (const [i, [writable, warm]] of kinds.entries()) {
    await settle();
    const name = `kind-${i}.txt`;
    const r = await exec(['touch', name], { writable });
    if (warm !== null) assert.equal(r.result.timingsMs.warm, warm, `command ${i}: ${JSON.stringify(r.result.timingsMs)}`);
    assert.equal(r.result.exitCode === 0, writable, `command ${i} (writable ${writable}): ${r.err}`);
    assert.equal(existsSync(join(s.dir, name)), writable, name);
  }
  // a /tmp size other than the jail ahead's: a jail built for it, with that size
  const r = await exec(['/bin/sh', '-c', 'head -c 9000000 /dev/zero > /tmp/big; echo $?'], { limits: { tmpBytes: 8 * 1024 * 1024 } });
  assert.equal(r.result.timingsMs.warm, false);
  assert.notEqual(r.out.toString(), '0\n', 'over the 8 MiB /tmp asked for');
});

test('escape-shaped calls are killed by the exec filter; the uncommon fail', async () => {
  for (const what of ['mount', 'ptrace', 'unshare']) {
    const r = await exec(['probe', what]);
    assert.equal(r.result.killedBy, 'seccomp', what + ' ' + JSON.stringify(r.result));
    assert.equal(r.result.signal, 'SIGSYS');
    assert.equal(r.out.length, 0);
  }
  const r = await exec(['probe', 'netlink']);
  assert.equal(r.result.exitCode, 0);
  assert.equal(r.out.toString(), '-1\n');
});

test('timeout kills a sleeping tree and a SIGTERM-ignoring one within timeout + 1 s', async () => {
  for (const argv of [['/bin/sh', '-c', 'sleep 1000 & sleep 1000'], ['probe', 'ignoreterm'], ['probe', 'daemon'], ['probe', 'closeout']]) {
    const r = await exec(argv, { timeoutMs: 1000 });
    assert.equal(r.result.timedOut, true, JSON.stringify(r.result));
    assert.equal(r.result.killedBy, 'timeout');
    assert.equal(r.result.signal, 'SIGKILL');
    assert.ok(r.result.durationMs < 2000, `${argv}: ${r.result.durationMs} ms`);
  }
  // nothing of them is left: the next command sees only itself
  const r = await exec(['ls', '/proc']);
  assert.ok(!/\b(2\d|1\d\d)\b/.test(r.out.toString()));
});

test('output caps: counted, not sent; 10,000 lines; writes forever', async () => {
  let r = await exec(['probe', 'lines'], { maxOutputBytes: 1000 });
  assert.equal(r.result.exitCode, 0);
  assert.equal(r.out.length, 1000);
  assert.equal(r.result.stdoutTruncated, true);
  assert.equal(r.result.stdoutBytes, 98890); // 10×7 + 90×8 + 900×9 + 9000×10
  assert.equal(r.result.stderrTruncated, false);
  r = await exec(['probe', 'spew'], { maxOutputBytes: 4096, timeoutMs: 1500 });
  assert.equal(r.result.timedOut, true);
  assert.equal(r.out.length, 4096);
  assert.ok(r.result.stdoutBytes > 1 << 20, String(r.result.stdoutBytes));
  // RLIMIT_FSIZE
  r = await exec(['/bin/sh', '-c', 'yes | head -c 100000 > /tmp/big; echo $?'], { limits: { fsizeBytes: 4096 } });
  assert.notEqual(r.out.toString(), '0\n');
});

test('a fork bomb ends within its limits and the shim still answers', async () => {
  const r = await exec(['probe', 'forkbomb'], { timeoutMs: 3000, limits: { nproc: 24 } });
  assert.equal(r.result.killedBy, 'timeout', JSON.stringify(r.result));
  assert.ok(r.result.durationMs < 4500);
  const a = await shim({ op: 'read', path: 'hello.txt' });
  assert.equal(a.answer.result.content, 'hello\n');
  assert.equal((await exec(['true'])).result.exitCode, 0);
});

test('the shim answers while a command runs; one command at a time', async () => {
  const running = exec(['sleep', '3'], { timeoutMs: 10000 });
  await new Promise((r) => setTimeout(r, 800));
  const t = Date.now();
  const a = await shim({ op: 'read', path: 'hello.txt' });
  assert.equal(a.answer.result.content, 'hello\n');
  assert.ok(Date.now() - t < 1500);
  const busy = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv: ['true'] });
  assert.equal(busy.ok, false);
  assert.match(busy.error, /one at a time|busy/);
  assert.equal((await running).result.exitCode, 0);
});

test('stop/cont hold the whole tree', async () => {
  // stop: a stopped tree writes nothing until it is continued (stopped once it has started)
  const r1 = exec(['/bin/sh', '-c', 'touch started; sleep 2; echo one'], { timeoutMs: 15000, writable: true });
  const t0 = Date.now();
  while (!existsSync(join(s.dir, 'started')) && Date.now() - t0 < 10000) await new Promise((r) => setTimeout(r, 20));
  let a = await control(srv.ctl, { op: 'exec_signal', jobId: s.jobId, what: 'stop' });
  assert.ok(a.ok, JSON.stringify(a));
  await new Promise((r) => setTimeout(r, 3000));
  a = await control(srv.ctl, { op: 'exec_signal', jobId: s.jobId, what: 'cont' });
  assert.ok(a.ok, JSON.stringify(a));
  const d1 = await r1;
  assert.equal(d1.out.toString(), 'one\n');
  assert.ok(Date.now() - t0 > 3000 && d1.result.durationMs > 3000, String(d1.result.durationMs));
});

test('kill reaches the whole tree', async () => {
  let a;
  const r2 = exec(['/bin/sh', '-c', 'sleep 100 & sleep 100'], { timeoutMs: 15000 });
  await new Promise((r) => setTimeout(r, 500));
  a = await control(srv.ctl, { op: 'exec_signal', jobId: s.jobId, what: 'kill' });
  assert.ok(a.ok, JSON.stringify(a));
  const d2 = await r2;
  assert.equal(d2.result.killedBy, 'signal');
  assert.equal(d2.result.signal, 'SIGKILL');
  assert.ok(d2.result.durationMs < 2500);
  a = await control(srv.ctl, { op: 'exec_signal', jobId: s.jobId, what: 'kill' });
  assert.equal(a.ok, false, 'nothing runs any more');
});

test('exec true: time through the walls (recorded in sandbox/WALLS.md)', async () => {
  const d = [];
  for (let i = 0; i < 10; i++) d.push((await exec(['/usr/bin/true'])).wall);
  d.sort((x, y) => x - y);
  console.log('exec true round trip ms: p50', d[5], 'min', d[0], 'max', d[9]);
});

test('without the socket channel there is no spawner: the contract says why, exec is refused', async () => {
  const srv2 = await startJail({ image: 'jailbox-sandbox:exec', env: { JAILBOX_SHIM_SOCKET_DIR: 'none' }, extra });
  try {
    const s2 = await openSession(srv2, () => {});
    const st = await srv2.req('GET', '/v1/jailbox/' + s2.jobId, { token: srv2.serviceToken });
    assert.equal(st.json.walls.exec.available, false);
    assert.match(st.json.walls.exec.reason, /socket channel/);
    const r = await control(srv2.ctl, { op: 'exec', jobId: s2.jobId, argv: ['true'] });
    assert.equal(r.ok, false);
    assert.equal(r.errno, 95); // ENOTSUP
    const a = await control(srv2.ctl, { jobId: s2.jobId, request: { op: 'ping' } });
    assert.equal(a.answer.result.pong, true, 'the shim works without the spawner');
  } finally {
    await srv2.stop();
  }
});

// over its memory limit (the session's less the reserve, sandbox/WALLS.md "Memory per command")
// the command is killed by the spawner's watch; the result says oom, and it is not a seccomp kill
test('a memory hog over the limit is reported as oom', async () => {
  const small = await openSession(srv, () => {}, { limits: { memoryMiB: 256, pids: 64 } });
  const t = Date.now();
  const r = await control(srv.ctl, { op: 'exec', jobId: small.jobId, argv: ['probe', 'memhog'], timeoutMs: 20000 }, 60000);
  console.log('memhog:', JSON.stringify(r), Date.now() - t, 'ms');
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.result.oom, true);
  assert.equal(r.result.killedBy, 'memory', JSON.stringify(r.result));
});

test('a jail ahead whose helper is gone is not used: the command gets a jail built for it', async () => {
  // the helper of the jail ahead dies while its bwrap cannot end yet (stopped): the spawner
  // has not seen the jail end when the request comes
  await settle();
  const inBox = (user, script) => execFileSync('docker', ['exec', '-u', user, s.containerId, '/bin/sh', '-c', script]).toString();
  const procs = inBox('65534', 'for p in /proc/[0-9]*; do set -- $(cat $p/stat); echo "$1 $2 $4"; done')
    .trim().split('\n').map((l) => l.split(' ')).map(([pid, comm, ppid]) => ({ pid: +pid, comm, ppid: +ppid }));
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  const helper = procs.filter((p) => p.comm === '(jailbox-shim)').sort((x, y) => y.pid - x.pid)[0];
  const init = byPid.get(helper.ppid), outer = byPid.get(init?.ppid);
  assert.equal(outer?.comm, '(bwrap)', JSON.stringify(procs));
  inBox('0', `kill -STOP ${outer.pid}`);
  try {
    inBox('65534', `kill -9 ${helper.pid}`);
    const r = await exec(['/bin/sh', '-c', 'echo ran'], { timeoutMs: 5000 });
    assert.equal(r.out.toString(), 'ran\n', JSON.stringify(r.result) + r.err);
    assert.equal(r.result.exitCode, 0);
    assert.equal(r.result.timingsMs.warm, false, JSON.stringify(r.result.timingsMs));
  } finally {
    try { inBox('0', `kill -CONT ${outer.pid}`); } catch { /* discarded: gone */ }
  }
  await settle();
  assert.equal((await exec(['true'])).result.timingsMs.warm, true, 'a jail ahead again');
});

test('nothing of a command outlives its result: no write after it, no abstract socket for the next', async () => {
  const { readdirSync, rmSync } = await import('node:fs');
  const count = () => readdirSync(s.dir).filter((n) => n.startsWith('w.')).length;
  // two background writers, left running at the command's end and at its timeout
  for (const extra of [{}, { timeoutMs: 1500 }]) {
    const r = await exec(['/bin/sh', '-c', `i=0; (while :; do touch w.$i; i=$((i+1)); done) & (while :; do touch w.b$i; i=$((i+1)); done) & sleep ${extra.timeoutMs ? 5 : 1}`], { writable: true, ...extra });
    const atResult = count();
    await new Promise((res) => setTimeout(res, 1500));
    assert.ok(atResult > 0, JSON.stringify(r.result));
    assert.equal(count(), atResult, 'a writer outlived the command: ' + JSON.stringify(r.result));
    for (const n of readdirSync(s.dir)) if (n.startsWith('w.')) rmSync(join(s.dir, n));
  }
  // a daemon holding an abstract Unix socket (abstract names live in a network namespace, and
  // each jail has its own): it binds, and the next command, in the jail built ahead, finds none
  let r = await exec(['probe', 'abind']);
  assert.equal(r.out.toString(), 'bound\n');
  r = await exec(['probe', 'aconn']);
  assert.equal(r.result.timingsMs.warm, true);
  assert.match(r.out.toString(), /^connect \d+\n$/);
});

test('a jail ahead has the limits of a jail built for the request', async () => {
  const limits = ['/bin/sh', '-c', 'cat /proc/self/limits; cat /proc/self/status'];
  const pick = (r) => r.out.toString().split('\n')
    .filter((l) => /^(Max (file size|processes|open files|core file size|stack size)|Cap|NoNewPrivs|Seccomp|Uid|Gid|Groups)/.test(l)).join('\n');
  await settle();
  const warm = await exec(limits, { writable: true });
  await settle();
  const ahead = await exec(limits, { writable: true });
  const cold = await exec(limits); // read-only after writable: built for it
  assert.equal(ahead.result.timingsMs.warm, true);
  assert.equal(cold.result.timingsMs.warm, false);
  assert.match(pick(ahead), /Max file size\s+1073741824\s+1073741824/);
  assert.equal(pick(ahead), pick(cold));
  assert.equal(pick(warm), pick(ahead));
});
