// prescan_names.test.mjs — file names are bytes: a workspace entry the pre-scan flags whose
// name is not UTF-8 is reported by its bytes (an escaped form and base64), the launch goes
// on, and the entry stays out of the agent's reach. Through the real stack (jailboxd, the
// worker's pre-scan, the shim in gVisor + Docker); needs root, Docker with runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { linkSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:prescan-names';
let K, srv;

before(async () => {
  K = await startSandboxServer(IMAGE, { JAILBOX_ESCAPE_ABORT: 'none' });
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

// `dir` joined with the name bytes `bytes` (a Buffer path: node passes it to the kernel as is)
const bpath = (dir, bytes) => Buffer.concat([Buffer.from(dir + '/'), Buffer.from(bytes)]);

test('flagged entries with non-UTF-8 names: reported by their bytes, the launch goes on', { timeout: 240000 }, async () => {
  const outside = join(srv.dir, 'outside');
  mkdirSync(outside, { recursive: true });
  writeFileSync(join(outside, 'secret.txt'), 'outside secret\n');
  const names = {
    link: [0x6c, 0x6e, 0xff, 0x2e, 0x6b, 0x65, 0x79],  // "ln\xff.key": a hard link to a file outside
    out: [0x6f, 0x75, 0x74, 0xfe],                      // "out\xfe": a symlink that leaves the workspace
    pipe: [0xff, 0x70, 0x69, 0x70, 0x65],               // "\xffpipe": a fifo
  };
  const S = await K.openSession((d) => {
    writeFileSync(join(d, 'ok.txt'), 'fine\n');
    linkSync(join(outside, 'secret.txt'), bpath(d, names.link));
    symlinkSync('/etc/shadow', bpath(d, names.out));
    // mkfifo(1) takes its name as an argument, which node passes as UTF-8: made from hex here
    execFileSync('python3', ['-c', 'import os, sys; os.mkfifo(bytes.fromhex(sys.argv[1]))', bpath(d, names.pipe).toString('hex')]);
  }, { mode: 'unsupervised' });
  const sess = await K.sessionOf(S.jobId);
  assert.equal(sess.state, 'awaiting_agent', sess.stateReason);
  const flagged = sess.walls.prescan.flagged;
  assert.equal(flagged.length, 3, JSON.stringify(sess.walls.prescan));
  const esc = (b) => Buffer.from(b).toString('latin1').replace(/[\x80-\xff]/g, (c) => '\\x' + c.charCodeAt(0).toString(16));
  for (const [kind, b] of [['hardlink', names.link], ['symlink_outside', names.out], ['fifo', names.pipe]]) {
    const f = flagged.find((x) => x.kind === kind);
    assert.ok(f, kind + ': ' + JSON.stringify(flagged));
    assert.equal(f.pathBase64, Buffer.from(b).toString('base64'), JSON.stringify(f));
    assert.equal(f.pathEscaped, esc(b), JSON.stringify(f));
    assert.ok(!f.path.includes('\\x') || f.pathEscaped, 'path stays the display form');
  }
  // the session works, and the flagged entries stay out of reach
  const agent = await K.connect(S.agentToken);
  await K.waitFor('active', async () => (await K.sessionOf(S.jobId)).state === 'active');
  const l = await K.ok(agent, 'list', { path: '.' });
  assert.deepEqual(l.entries.map((e) => e.name).sort(), ['ok.txt']);
  assert.equal((await K.ok(agent, 'read', { path: 'ok.txt' })).content, 'fine\n');
  const bad = toolFailure(await K.call(agent, 'read', { path: Buffer.from(names.link).toString('latin1') }));
  assert.ok(bad, 'a read of the flagged name is refused');
});
