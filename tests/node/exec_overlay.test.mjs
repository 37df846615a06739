// exec_overlay.test.mjs — a writable exec on a copy-on-write view of the workspace, through the
// real stack (socket.io-client agent → jailboxd → worker → the session's spawner inside gVisor
// + Docker), under the test-only switch JB_TEST_EXEC_OVERLAY (the worker asks the spawner for
// an overlay per writable command, puts the spawner's manifest of its upper into the result as
// overlayManifest and discards the upper, so nothing lands). One command deletes a file,
// replaces a directory, changes a mode, makes a file and a symlink and renames a directory: the
// host workspace stays byte for byte as it was, the manifest lists each change with its type,
// whiteout, opaque flag and mode, and the command cannot see /jailbox-cs. A write past the
// upper's size (JAILBOX_CHANGESET_UPPER_MIB=8) fails with ENOSPC and the session goes on.
// Needs root, Docker with runsc; the image gets /bin/sh and the coreutils the commands use.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, realpathSync, writeFileSync, chmodSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:exec-overlay';
const TOOLS = ['rm', 'mkdir', 'chmod', 'mv', 'ln', 'ls', 'dd', 'cat', 'echo', 'printf'];

let K, srv, S;

// every entry under `dir`: path → type, mode, size, content's SHA-256 or link target
function snapshot(dir, rel = '', out = {}) {
  for (const n of readdirSync(join(dir, rel)).sort()) {
    const p = rel ? `${rel}/${n}` : n;
    const st = lstatSync(join(dir, p));
    const e = { mode: st.mode, size: st.size, mtime: st.mtimeMs };
    if (st.isFile()) e.sha = createHash('sha256').update(readFileSync(join(dir, p))).digest('hex');
    if (st.isSymbolicLink()) e.target = readlinkSync(join(dir, p));
    out[p] = e;
    if (st.isDirectory()) snapshot(dir, p, out);
  }
  return out;
}

before(async () => {
  K = await startSandboxServer(IMAGE, { JB_TEST_EXEC_OVERLAY: '1', JAILBOX_CHANGESET_UPPER_MIB: '8' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, ...TOOLS.map((t) => `/usr/bin/${t}`)]);
  srv = K.srv;
  S = await K.openSession((d) => {
    writeFileSync(join(d, 'gone'), 'a\n');
    mkdirSync(join(d, 'd'));
    writeFileSync(join(d, 'd/f1'), 'f\n');
    writeFileSync(join(d, 'd/f2'), 'g\n');
    writeFileSync(join(d, 'modme'), 'm\n');
    chmodSync(join(d, 'modme'), 0o644);
    chownSync(join(d, 'modme'), 65534, 65534); // a file of the jail's uid: its chmod is allowed
    mkdirSync(join(d, 'lowerdir/sub'), { recursive: true });
    writeFileSync(join(d, 'lowerdir/sub/x'), 'x\n');
    writeFileSync(join(d, 'lowerdir/y'), 'y\n');
    writeFileSync(join(d, 'keep'), 'k\n');
  }, { mode: 'unsupervised' });
  S.agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

async function writable(command) {
  const r = await K.call(S.agent, 'exec', { command, writable: true, timeoutSec: 120 }, 180000);
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  return r.result.structuredContent;
}

test('a writable command on the overlay: the workspace untouched, every change in the manifest, /jailbox-cs unseen', async () => {
  const before = snapshot(S.dir);
  const r = await writable('rm gone && rm -r d && mkdir d && echo n > d/new && chmod 600 modme && ' +
    'echo hello > newfile && ln -s target/x lnk && mv lowerdir newname && echo more >> newname/y && ' +
    'ls -a /; ls /jailbox-cs; echo "cs=$?"; cat newname/sub/x; ls');
  assert.equal(r.exitCode, 0, JSON.stringify(r));
  assert.doesNotMatch(r.stdout, /jailbox-cs/, r.stdout);
  assert.match(r.stdout, /cs=2\n/, r.stdout); // ls: cannot access '/jailbox-cs'
  assert.match(r.stderr, /cannot access '\/jailbox-cs'/, r.stderr);
  assert.match(r.stdout, /x\nd\nkeep\nlnk\nmodme\nnewfile\nnewname\n$/, r.stdout + r.stderr); // the command saw its changes
  assert.deepEqual(snapshot(S.dir), before, 'the host workspace changed');
  assert.ok(Array.isArray(r.overlayManifest), JSON.stringify(r).slice(0, 2000));
  const by = Object.fromEntries(r.overlayManifest.map((e) => [e.path, e]));
  const pick = (p) => by[p] && { type: by[p].type, whiteout: by[p].whiteout, opaque: by[p].opaque };
  assert.deepEqual(pick('gone'), { type: 'char', whiteout: true, opaque: false });
  assert.deepEqual(pick('d'), { type: 'dir', whiteout: false, opaque: true });
  assert.deepEqual([by['d/new']?.type, by['d/new']?.size], ['file', 2]);
  assert.equal(by['d/f1'], undefined);
  assert.deepEqual([by.modme?.type, by.modme?.mode, by.modme?.size], ['file', 0o600, 2]);
  assert.deepEqual([by.newfile?.type, by.newfile?.size], ['file', 6]);
  assert.deepEqual([by.lnk?.type, by.lnk?.target, by.lnk?.whiteout], ['symlink', 'target/x', false]);
  // gVisor renames a lower directory by copying its subtree up (no EXDEV)
  assert.deepEqual(pick('lowerdir'), { type: 'char', whiteout: true, opaque: false });
  assert.deepEqual(pick('newname'), { type: 'dir', whiteout: false, opaque: true });
  assert.deepEqual([by['newname/sub/x']?.type, by['newname/y']?.size], ['file', 7]);
  assert.equal(by.keep, undefined, 'an untouched file is not in the upper');
  assert.equal(by['newname/sub']?.type, 'dir');
  assert.equal(r.overlayManifest.length, 11, JSON.stringify(r.overlayManifest));
});

test('a write past the upper\'s size fails with ENOSPC; the session goes on and nothing lands', async () => {
  const before = snapshot(S.dir);
  const r = await writable('dd if=/dev/zero of=big bs=1M count=32; echo "dd=$?"');
  assert.match(r.stderr, /No space left on device/, r.stderr);
  assert.match(r.stdout, /dd=1\n/, r.stdout);
  const big = r.overlayManifest?.find((e) => e.path === 'big');
  assert.ok(big && big.size > 0 && big.size <= 8 << 20, JSON.stringify(r.overlayManifest));
  assert.deepEqual(snapshot(S.dir), before);
  // the upper was discarded: the next command has the whole size again, and sees no big
  const r2 = await writable('ls; dd if=/dev/zero of=small bs=1M count=4 2>/dev/null; echo "dd=$?"');
  assert.equal(r2.stdout, 'd\ngone\nkeep\nlowerdir\nmodme\ndd=0\n');
  assert.deepEqual(r2.overlayManifest.map((e) => [e.path, e.size]), [['small', 4 << 20]]);
});
