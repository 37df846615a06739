// prescan_secrets.test.mjs — the pre-scan lists the files that look like secrets (the scan
// rules' `secret` rules over each file's bytes, also across the edge of a 64 KiB window and in
// UTF-16), so that the buyer can exclude them before the agent reads them; with the operator's
// JAILBOX_PRESCAN_EXCLUDE_SECRETS=1 they are flagged `secret` from the start: hidden from list,
// refused to read, and exec (whose jail sees the whole workspace) is not offered. A file with no
// secret is neither. The pre-scan's treeSha256 is the tree hash v1 of the workspace at open:
// the same digest as `jailboxctl tree-hash` and the Python reference (lib/treehash.py) give, on
// a tree with every kind of entry. Through the real stack (jailboxd, the worker's pre-scan, the shim in gVisor
// + Docker); needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:prescan-secrets';
const CTL = process.env.JAILBOXCTL || join(dirname(process.env.JAILBOXD), 'jailboxctl');
const treeHashPy = (d) => execFileSync('python3', ['lib/treehash.py', d], { encoding: 'utf8' }).trim();
const treeHashCtl = (d) => execFileSync(CTL, ['tree-hash', d], { encoding: 'utf8' }).trim();
let K, srv;

before(async () => {
  // /bin/sh: exec is offered on the image, so that its refusal below is the flagged files'
  // 64 KiB of content at most for a tree hash: the first test's workspace is over it
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none', JAILBOX_PRESCAN_EXCLUDE_SECRETS: '1', JAILBOX_TREE_HASH_MAX_BYTES: '65536' }, [`${realpathSync('/bin/sh')}:/bin/sh`]);
  srv = K.srv;
});

after(async () => {
  if (K) K.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

const AWS = 'AKIA' + 'IOSFODNN7EXAMPLE';

test('files that look like secrets: listed by the pre-scan with their rules, hidden and refused when the operator excludes them', { timeout: 240000 }, async () => {
  const S = await K.openSession((d) => {
    writeFileSync(join(d, 'ok.txt'), 'nothing to see\n');
    mkdirSync(join(d, 'conf'));
    writeFileSync(join(d, 'conf', 'aws.env'), `AWS_ACCESS_KEY_ID=${AWS}\n`);
    // a key whose bytes straddle the first 64 KiB window's edge
    const pad = 'x'.repeat(65536 - 10);
    writeFileSync(join(d, 'edge.log'), pad + `key ${AWS} end\n`);
    // a PEM header in UTF-16LE
    writeFileSync(join(d, 'wide.txt'), Buffer.from('-----BEGIN RSA PRIVATE KEY-----\n', 'utf16le'));
  }, { mode: 'unsupervised' });
  const sess = await K.sessionOf(S.jobId);
  assert.equal(sess.state, 'awaiting_agent', sess.stateReason);
  const pre = sess.walls.prescan;
  const listed = Object.fromEntries(pre.secrets.map((x) => [x.path, x.rules]));
  assert.deepEqual(Object.keys(listed).sort(), ['conf/aws.env', 'edge.log', 'wide.txt'], JSON.stringify(pre.secrets));
  assert.deepEqual(listed['conf/aws.env'], ['aws_access_key_id']);
  assert.deepEqual(listed['edge.log'], ['aws_access_key_id']);
  assert.deepEqual(listed['wide.txt'], ['private_key']);
  assert.equal(pre.secretsCount, 3);
  const secretFlags = pre.flagged.filter((f) => f.kind === 'secret').map((f) => f.path).sort();
  assert.deepEqual(secretFlags, ['conf/aws.env', 'edge.log', 'wide.txt']);
  // hidden and refused; the clean file is served
  const agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const l = await K.ok(agent, 'list', { path: '.' });
  assert.deepEqual(l.entries.map((e) => e.name).sort(), ['conf', 'ok.txt']);
  assert.equal((await K.ok(agent, 'read', { path: 'ok.txt' })).content, 'nothing to see\n');
  const f = toolFailure(await K.call(agent, 'read', { path: 'conf/aws.env' }));
  assert.ok(f, 'a read of a secret file is refused');
  assert.equal(f.data?.reason, 'flagged', JSON.stringify(f));
  const x = toolFailure(await K.call(agent, 'exec', { argv: ['cat', 'conf/aws.env'] }));
  assert.equal(x?.data?.reason, 'denied', 'exec is not offered while a secret file is flagged: ' + JSON.stringify(x));
  // the buyer saw the list in the pre-scan's audit entry too
  const audit = (await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: S.buyerToken })).text
    .trim().split('\n').map((e) => JSON.parse(e));
  const ps = audit.find((e) => e.operation === 'pre_scan');
  assert.equal(ps.details.secretsCount, 3, JSON.stringify(ps.details));
  // the tree is over the worker's JAILBOX_TREE_HASH_MAX_BYTES: no tree hash, and why
  assert.equal(ps.details.treeSha256, null, JSON.stringify(ps.details));
  assert.equal(ps.details.treeSha256Why, 'too_large');
  assert.ok(!JSON.stringify(audit).includes(AWS), 'the secret itself is nowhere in the chain');
});

test('tree hash v1: the pre-scan\'s treeSha256 is the workspace at open, as jailboxctl tree-hash and the Python reference compute it', { timeout: 240000 }, async () => {
  let atOpen;
  const S = await K.openSession((d) => {
    writeFileSync(join(d, 'a.txt'), 'one\n'); // "a.txt" sorts before "a/…" ('.' < '/')
    mkdirSync(join(d, 'a', 'b'), { recursive: true });
    writeFileSync(join(d, 'a', 'b', 'run.sh'), '#!/bin/sh\n');
    chmodSync(join(d, 'a', 'b', 'run.sh'), 0o4755);
    chmodSync(join(d, 'a'), 0o700);
    writeFileSync(join(d, 'empty'), '');
    symlinkSync('/', join(d, 'root-link')); // never followed
    symlinkSync('a/b/run.sh', join(d, 'inside-link'));
    // a fifo and a name that is not UTF-8 (node passes string names as UTF-8: made in Python)
    execFileSync('python3', ['-c', 'import os, sys; os.mkfifo(sys.argv[1] + "/fifo"); open(os.fsencode(sys.argv[1]) + b"/n\\xff\\xfe", "wb").write(b"x")', d]);
    atOpen = treeHashPy(d);
    assert.equal(treeHashCtl(d), atOpen, 'jailboxctl tree-hash and the reference agree');
  }, { mode: 'unsupervised' });
  assert.match(atOpen, /^[0-9a-f]{64}$/);
  const sess = await K.sessionOf(S.jobId);
  assert.equal(sess.walls.prescan.treeSha256, atOpen, JSON.stringify(sess.walls.prescan));
  const audit = (await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: S.buyerToken })).text
    .trim().split('\n').map((e) => JSON.parse(e));
  const ps = audit.find((e) => e.operation === 'pre_scan');
  assert.equal(ps.details.treeSha256, atOpen, JSON.stringify(ps.details));
  assert.equal(ps.details.treeSha256Why, undefined);
  // while the session runs the tree carries the jail's group bits (on a/, 0700 at open): both
  // still agree on it, and it is not the tree at open — the pre-scan hashed before the grant
  const during = treeHashCtl(S.dir);
  assert.equal(during, treeHashPy(S.dir));
  assert.notEqual(during, atOpen);
  // once the session is over and its grant undone, the untouched tree hashes as at open
  const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: srv.serviceToken, body: { reason: 'test over' } });
  assert.equal(r.status, 200, r.text);
  await K.waitFor('the tree as at open', () => treeHashCtl(S.dir) === atOpen, 30000);
  assert.equal(treeHashPy(S.dir), atOpen);
  // past its bound, no digest: null and the reason, exit 1
  const past = (() => {
    try {
      return execFileSync(CTL, ['tree-hash', S.dir, '--json'], { encoding: 'utf8', env: { ...process.env, JAILBOX_TREE_HASH_MAX_BYTES: '5' } });
    } catch (e) { return { status: e.status, stdout: e.stdout }; }
  })();
  assert.equal(past.status, 1, JSON.stringify(past));
  assert.deepEqual(JSON.parse(past.stdout), { treeSha256: null, treeSha256Why: 'too_large' });
});
