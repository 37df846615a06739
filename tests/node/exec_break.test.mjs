// exec_break.test.mjs — attacks on exec's walls (issue 22's review): syscalls the exec filter
// must stop whatever way they are made (clone3, the x32 ABI, int 0x80, io_uring, an ioctl
// request with high bits, clone with namespace flags), what a command can reach of the
// spawner and the shim, the spawner's request checks, and what a writable command leaves in
// the workspace. Driven over the worker's control socket like exec_walls.test.mjs. Needs
// root, Docker with runsc (deploy/start-dockerd.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync, lstatSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startJail, openSession, control } from './lib/jail.mjs';
import { agentKit, toolFailure } from './lib/agent.mjs';
import { readFileSync } from 'node:fs';

const PROBE_C = String.raw`
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  long r = -2;
  if (!strcmp(m, "clone3")) { struct clone_args a = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD}; r = syscall(435, &a, sizeof a); if (r == 0) _exit(0); }
  else if (!strcmp(m, "x32unshare")) r = syscall(0x40000000 | 272, CLONE_NEWUSER);
  else if (!strcmp(m, "x32getpid")) r = syscall(0x40000000 | 39);
  else if (!strcmp(m, "int80")) { long ret; __asm__ volatile("int $0x80" : "=a"(ret) : "a"(310L), "b"((long)CLONE_NEWUSER) : "memory"); r = ret; }
  else if (!strcmp(m, "iouring")) { char p[120] = {0}; r = syscall(425, 8, p); }
  else if (!strcmp(m, "tiocsti_hi")) { char c = 'x'; r = syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c); }
  else if (!strcmp(m, "cloneflags")) { r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0); if (r == 0) _exit(0); }
  else if (!strcmp(m, "bpf")) r = syscall(SYS_bpf, 0, 0, 0);
  else if (!strcmp(m, "keyctl")) r = syscall(SYS_keyctl, 0, 0, 0);
  else if (!strcmp(m, "userfaultfd")) r = syscall(SYS_userfaultfd, 0);
  else if (!strcmp(m, "perf")) r = syscall(SYS_perf_event_open, 0, 0, -1, -1, 0);
  else if (!strcmp(m, "setns")) r = syscall(SYS_setns, 0, 0);
  else if (!strcmp(m, "setuid0")) r = setuid(0);
  else if (!strcmp(m, "kill1")) r = kill(1, SIGKILL);
  else if (!strcmp(m, "packet")) r = syscall(SYS_socket, 17, 3, 0);
  else return 99;
  printf("%ld %d\n", r, r < 0 ? errno : 0);
  return 0;
}`;

let srv, s, bin, extra, K;
before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'jbbreak-'));
  writeFileSync(join(dir, 'attack.c'), PROBE_C);
  bin = join(dir, 'attack');
  execFileSync('gcc', ['-O2', '-static', '-o', bin, join(dir, 'attack.c')]);
  const sh = execFileSync('readlink', ['-f', '/bin/sh']).toString().trim();
  extra = [`${sh}:/bin/sh`, '/usr/bin/cat', '/usr/bin/ls', '/usr/bin/ln', '/usr/bin/mkfifo',
    '/usr/bin/find', '/usr/bin/rm', '/usr/bin/chmod', '/usr/bin/sleep', '/usr/bin/head', '/usr/bin/tr', '/usr/bin/true', `${bin}:/usr/bin/attack`];
  // every denied_path signal alerts (by default every 10th): what a writable command leaves
  srv = await startJail({ image: 'jailbox-sandbox:break', env: { JAILBOX_ESCAPE_ABORT: 'none', JAILBOX_ALERT_AFTER: 'excluded_path:3,denied_path:1' }, extra });
  s = await openSession(srv, (d) => {
    writeFileSync(join(d, 'hello.txt'), 'hello\n');
    writeFileSync(join(dir, 'outside.txt'), 'HOSTFILE\n');
    symlinkSync(join(dir, 'outside.txt'), join(d, 'out-abs'));
    symlinkSync('../../../../../../../../etc/hostname', join(d, 'out-rel'));
  });
  K = agentKit(srv);
});
after(async () => {
  K?.closeSockets();
  await srv?.stop();
});

async function exec(argv, more = {}) {
  const r = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv, timeoutMs: 10000, ...more }, 30000);
  assert.ok(r.ok, JSON.stringify(r));
  r.out = Buffer.from(r.stdout, 'base64').toString();
  r.err = Buffer.from(r.stderr, 'base64').toString();
  return r;
}

test('escape-shaped calls are killed however they are made', async () => {
  for (const what of ['cloneflags', 'bpf', 'keyctl', 'userfaultfd', 'perf', 'setns', 'tiocsti_hi']) {
    const r = await exec(['attack', what]);
    assert.equal(r.result.killedBy, 'seccomp', what + ' ' + JSON.stringify(r.result) + r.out);
  }
});

// The exec filter kills the process that makes the call; the result (and so the security
// signal) is only the command's own end: a shell that runs the call in a child and goes on
// hides it (sandbox/shim/spawner.c finish, sandbox/worker/exec.c jb_exec_run).
test('a seccomp kill inside a command\'s tree is still a security signal', { todo: 'only the command\'s own exit status is looked at' }, async () => {
  const r = await exec(['/bin/sh', '-c', 'attack bpf; echo survived']);
  assert.equal(r.out, 'survived\n', 'the child was killed, the shell went on');
  assert.equal(r.result.killedBy, 'seccomp', JSON.stringify(r.result));
});

test('clone3 and io_uring answer ENOSYS; the x32 ABI and int 0x80 never succeed', async () => {
  for (const what of ['clone3', 'iouring']) {
    const r = await exec(['attack', what]);
    assert.equal(r.out, '-1 38\n', what + ' ' + JSON.stringify(r.result));
  }
  for (const what of ['x32unshare', 'x32getpid', 'int80']) {
    const r = await exec(['attack', what]);
    console.log(what, JSON.stringify(r.result), JSON.stringify(r.out));
    // killed (the filter's bad-arch action, or gVisor), or an error: never a success
    assert.ok(r.result.signal || /^-?\d+ [1-9]\d*\n$/.test(r.out) && !r.out.startsWith('0 '), what + ' ' + r.out);
  }
});

test('no privilege to take back and nothing outside the jail to signal', async () => {
  assert.equal((await exec(['attack', 'setuid0'])).out, '-1 1\n');
  assert.equal((await exec(['attack', 'kill1'])).out, '-1 1\n', 'the jail\'s pid 1 is root: EPERM');
  assert.equal((await exec(['attack', 'packet'])).out, '-1 1\n');
  // no Unix socket of the shim, the spawner or the worker anywhere in the jail
  const r = await exec(['/bin/sh', '-c', 'find / -xdev -type s 2>/dev/null; find /tmp /workspace /etc /usr -type s 2>/dev/null; ls /sys 2>&1 | head -3']);
  console.log('sockets / sys:', JSON.stringify(r.out));
  assert.doesNotMatch(r.out, /\.sock|jailbox/);
});

test('a symlink leading out of the workspace leads nowhere in the jail', async () => {
  for (const link of ['out-abs', 'out-rel']) {
    const r = await exec(['cat', link]);
    assert.notEqual(r.result.exitCode, 0, link + ': ' + r.out);
    assert.doesNotMatch(r.out, /HOSTFILE/);
  }
  // nor as the cwd: refused before anything runs
  const x = await control(srv.ctl, { op: 'exec', jobId: s.jobId, argv: ['true'], cwd: 'out-abs' });
  assert.match(x.error, /bad_cwd/);
});

// an agent session of `mode` on a workspace built by `build`, active, with its two sockets
async function agentSession(build, more = {}) {
  const S = await K.openSession(build, { mode: 'unsupervised', ...more });
  S.agent = await K.connect(S.agentToken);
  S.buyer = await K.connect(S.buyerToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  return S;
}
const stdoutOf = (r) => r.result?.structuredContent?.stdout;

// The command's jail binds the whole workspace (sandbox/shim/spawner.c jail_args): a session
// with exclusions or pre-scan flags is refused exec, so nothing it hides is reached
test('an excluded file stays out of a command\'s reach: exec is refused where there are exclusions', async () => {
  const S = await agentSession((d) => {
    writeFileSync(join(d, 'secret.env'), 'TOKEN=TOPSECRET\n');
    writeFileSync(join(d, 'ok.txt'), 'ok\n');
  }, { exclude: ['secret.env'] });
  await K.refused(S.agent, 'read', { path: 'secret.env' }, 'excluded');
  const e = await K.refused(S.agent, 'exec', { argv: ['cat', 'secret.env'] }, 'denied');
  assert.match(e.message, /exclusions/);
  await K.refused(S.agent, 'exec', { command: 'echo changed > secret.env', writable: true }, 'denied');
  assert.equal(readFileSync(join(S.dir, 'secret.env'), 'utf8'), 'TOKEN=TOPSECRET\n');
  // a session without exclusions runs commands
  const T = await agentSession((d) => writeFileSync(join(d, 'ok.txt'), 'ok\n'));
  assert.equal(stdoutOf(await K.call(T.agent, 'exec', { argv: ['cat', 'ok.txt'] })), 'ok\n');
});

// A writable command's effects are found when it ends (against the tree just before it ran);
// what the file tools refuse and it leaves behind is removed and signalled
test('a writable command: its changes are listed; a symlink leading out, a fifo and a new hard link it leaves are removed and signalled', async () => {
  const S = await agentSession((d) => {
    writeFileSync(join(d, 'keep.txt'), 'keep\n');
    writeFileSync(join(d, 'mod.txt'), 'before\n');
    writeFileSync(join(d, 'del.txt'), 'gone\n');
    writeFileSync(join(d, 'mode.txt'), 'm\n'); // (the jail's uid owns no file of the buyer's: no chmod)
  });
  const r = await K.ok(S.agent, 'exec', { writable: true, command:
    'echo new > add.txt; echo after > mod.txt; rm del.txt; ln -s /etc/shadow out; mkfifo ff 2>/dev/null; ln keep.txt keep2.txt; ' +
    // a link that leaves only through another link (q is the directory itself), one that stays
    'ln -s . q; ln -s q/q/q/../../../etc/hostname esc; ln -s mod.txt in; ' +
    // two new names of one new file: the first by path stays
    'echo n > n1; ln n1 n2' });
  const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
  assert.equal(by['add.txt']?.change, 'added', JSON.stringify(r.changes));
  assert.equal(by['add.txt'].sha256, createHash('sha256').update('new\n').digest('hex'));
  assert.equal(by['mod.txt']?.change, 'modified');
  assert.equal(by['mod.txt'].sha256, createHash('sha256').update('after\n').digest('hex'));
  assert.equal(by['del.txt']?.change, 'deleted');
  assert.equal(by['mode.txt'], undefined, 'an untouched file is not listed');
  assert.equal(by['keep.txt']?.change, 'modified', 'a file that got a second name is no longer hashed');
  assert.deepEqual([by.out?.change, by.out?.flagged, by.out?.target, by.out?.removed], ['added', 'symlink_outside', '/etc/shadow', true]);
  // exec's filter refuses mknod (EPERM): a fifo cannot be made; were it made, it would go
  if (by.ff) assert.deepEqual([by.ff.flagged, by.ff.removed], ['fifo', true]);
  assert.deepEqual([by['keep2.txt']?.flagged, by['keep2.txt']?.removed], ['hardlink', true]);
  assert.deepEqual([by.esc?.flagged, by.esc?.removed], ['symlink_outside', true], JSON.stringify(by.esc));
  assert.equal(by.in?.removed, undefined);
  assert.equal(by.q?.removed, undefined);
  assert.equal(by.n1?.removed, undefined);
  assert.deepEqual([by.n2?.flagged, by.n2?.removed], ['hardlink', true]);
  assert.equal(r.changesTotal, r.changes.length);
  // gone from the host's workspace; the buyer's files as the command left them
  for (const p of ['out', 'ff', 'keep2.txt', 'esc', 'n2']) assert.throws(() => lstatSync(join(S.dir, p)), p);
  for (const p of ['in', 'q', 'n1']) assert.ok(lstatSync(join(S.dir, p)), p);
  assert.equal(readFileSync(join(S.dir, 'n1'), 'utf8'), 'n\n');
  assert.equal(readFileSync(join(S.dir, 'keep.txt'), 'utf8'), 'keep\n');
  assert.equal(lstatSync(join(S.dir, 'keep.txt')).nlink, 1);
  assert.equal(readFileSync(join(S.dir, 'mod.txt'), 'utf8'), 'after\n');
  // an alert to the buyer (denied_path: the command ran inside the walls, nothing escaped;
  // what it left is gone), naming the first entry removed
  const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
  assert.match(alert.detail, /^exec: symlink_outside esc -> q\/q\/q\/\.\.\//, JSON.stringify(alert));
  // a read-only command changes nothing and lists nothing
  const ro = await K.ok(S.agent, 'exec', { argv: ['cat', 'keep.txt'] });
  assert.equal(ro.changes, undefined);
  // the change summary has the writable exec (and not the read-only one), with its effects
  const cs = await srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: S.buyerToken });
  assert.equal(cs.status, 200, cs.text);
  const ex = cs.json.changes.filter((c) => c.tool === 'exec');
  assert.equal(ex.length, 1, cs.text);
  assert.equal(ex[0].argv[0], '/bin/sh');
  assert.deepEqual(ex[0].effects, r.changes);
  assert.equal(ex[0].effectsTotal, r.changesTotal);
});

test('kill: the agent\'s token, another session\'s op', async () => {
  const A = await agentSession(() => {});
  const B = await agentSession(() => {});
  const run = K.call(B.agent, 'exec', { argv: ['sleep', '30'], timeoutSec: 30 });
  const ops = await K.waitFor('running', async () => {
    const o = await srv.req('GET', `/v1/jailbox/${B.jobId}/ops?state=running`, { token: B.buyerToken });
    return o.json?.ops?.find((x) => x.tool === 'exec');
  }, 20000);
  const opId = ops.opId;
  // the agent may not kill (REST, socket); A's buyer may not kill B's op through either path
  let x = await srv.req('POST', `/v1/jailbox/${B.jobId}/ops/${opId}/kill`, { token: B.agentToken });
  assert.equal(x.status, 403, x.text);
  const ak = await B.agent.timeout(3000).emitWithAck('jailbox:kill', { opId }).catch((e) => ({ err: String(e) }));
  assert.notEqual(ak?.ok, true, JSON.stringify(ak));
  x = await srv.req('POST', `/v1/jailbox/${B.jobId}/ops/${opId}/kill`, { token: A.buyerToken });
  assert.equal(x.status, 403, x.text);
  x = await srv.req('POST', `/v1/jailbox/${A.jobId}/ops/${opId}/kill`, { token: A.buyerToken });
  assert.equal(x.status, 404, x.text);
  const sk = await A.buyer.timeout(5000).emitWithAck('jailbox:kill', { opId });
  assert.equal(sk.error?.code, 'not_found', JSON.stringify(sk));
  // still running: B's buyer ends it
  x = await srv.req('POST', `/v1/jailbox/${B.jobId}/ops/${opId}/kill`, { token: B.buyerToken });
  assert.equal(x.status, 200, x.text);
  const f = toolFailure(await run);
  assert.equal(f?.data?.reason ?? f?.code, 'killed', JSON.stringify(f));
});

test('filling /tmp in a small sandbox ends in ENOSPC; the session goes on', async () => {
  const small = await openSession(srv, () => {}, { limits: { memoryMiB: 256, pids: 64 } });
  const run = (argv) => control(srv.ctl, { op: 'exec', jobId: small.jobId, argv, timeoutMs: 20000 }, 60000);
  const r = await run(['/bin/sh', '-c', 'head -c 400000000 /dev/zero > /tmp/big; echo rc=$?']);
  console.log('fill /tmp:', JSON.stringify(r.result), Buffer.from(r.stdout ?? '', 'base64').toString(), Buffer.from(r.stderr ?? '', 'base64').toString().slice(0, 200));
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.result.oom, false, 'the sandbox died of a full /tmp');
  assert.match(Buffer.from(r.stdout, 'base64').toString(), /rc=[1-9]/);
  const a = await control(srv.ctl, { jobId: small.jobId, request: { op: 'ping' } });
  assert.equal(a.answer?.result?.pong, true, JSON.stringify(a));
});

// The buyer approves an exec seeing argv, cwd, env values and stdin's size: what a shell or an
// interpreter reads from stdin would run unseen (api/events.md, approval_request of exec), so
// it is shown as a write's content is.
test('a supervised exec shows the buyer the program it feeds on stdin', async () => {
  const S = await agentSession(() => {}, { mode: 'supervised' });
  const call = K.call(S.agent, 'exec', { argv: ['/bin/sh'], stdin: 'echo HIDDEN-SCRIPT\n' });
  const ev = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec');
  await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${ev.opId}`, { token: S.buyerToken });
  await call;
  assert.equal(ev.stdinPreview, 'echo HIDDEN-SCRIPT\n', JSON.stringify(ev));
  assert.deepEqual([ev.stdinBytes, ev.stdinPreviewTruncated], [19, false]);
  assert.equal(ev.stdinSha256, createHash('sha256').update('echo HIDDEN-SCRIPT\n').digest('hex'));
  // control bytes escape six-fold in JSON: the preview is shortened, the request stays whole
  const ctl = '\x01'.repeat(2000);
  const call2 = K.call(S.agent, 'exec', { argv: ['/bin/sh'], stdin: ctl });
  const ev2 = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.opId !== ev.opId);
  assert.ok(ev2.opId && ev2.argv, JSON.stringify(ev2).slice(0, 300));
  assert.equal(ev2.stdinPreviewTruncated, true);
  assert.ok(ev2.stdinPreview.length < 2000 && ctl.startsWith(ev2.stdinPreview));
  assert.equal(ev2.stdinBytes, 2000);
  await srv.req('POST', `/v1/jailbox/${S.jobId}/reject/${ev2.opId}`, { token: S.buyerToken });
  await call2;
});

// 8 MiB a stream of them took 20 s and a 100 MB answer (each escaped as \u00XX): see the review
test('1 MiB of control bytes on each stream reach the agent', { timeout: 60000 }, async () => {
  const S = await agentSession(() => {});
  const t = Date.now();
  const r = await K.call(S.agent, 'exec', {
    command: 'head -c 1048576 /dev/zero | tr "\\000" "\\001"; head -c 1048576 /dev/zero | tr "\\000" "\\002" >&2',
    maxOutputBytes: 1048576 }, 50000);
  const ms = Date.now() - t;
  const sc = r.result?.structuredContent;
  console.log('control bytes:', ms, 'ms', JSON.stringify(r).length, 'bytes of answer', sc?.stdoutBytes, sc?.stderrBytes, JSON.stringify(r.error ?? '').slice(0, 300));
  assert.equal(sc?.stdout?.length, 1048576);
  const ok = await K.call(S.agent, 'exec', { argv: ['true'] });
  assert.ok(!toolFailure(ok));
});
