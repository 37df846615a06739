// landing.test.mjs — the landing check of the file tools (api/core/op_landing.c) through the
// whole real stack: socket.io-client agent → jailboxd → ops row → jailbox-worker →
// jailbox-shim in gVisor + Docker + bwrap, on a workspace that holds real git repositories
// made on the host. A move into a hook, a directory of hooks moved to .git/hooks, a directory
// moved so that a workflow lands in .github/workflows, a mkdir in .git/hooks, .git/config
// moved away and a write to the target of a hook that is a symlink are refused `flagged` —
// with a security alert and an audit entry decided by the scanner, before any approval is
// asked — in an unsupervised and in a supervised session; clean moves and mkdirs still run, and
// a directory over the check's bound (10,000 entries) is refused whole.
// Afterwards the buyer's own `git status` and `git commit` on the host run nothing of the
// agent's. Needs root, Docker with runsc (as fileops.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';

let K;
const markers = mkdtempSync(join(tmpdir(), 'jb-landing-'));
const sessions = {}; // mode -> {S, agent, buyer, marker}

const git = (dir, ...args) => spawnSync('git', ['-c', 'safe.directory=*', '-c', 'user.name=buyer', '-c', 'user.email=b@example.com', ...args], { cwd: dir, encoding: 'utf8' });

// a workspace with a repository at the root (.git/hooks as git init makes it, a hook that is
// a symlink to the buyer's own script) and one in sub/ without a hooks directory
function buildWorkspace(d, marker, mode) {
  const hook = `#!/bin/sh\ntouch ${marker}\n`;
  mkdirSync(join(d, 'scripts'));
  writeFileSync(join(d, 'scripts/hook.sh'), '#!/bin/sh\nexit 0\n');
  chmodSync(join(d, 'scripts/hook.sh'), 0o755);
  writeFileSync(join(d, 'notes.txt'), 'notes\n');
  assert.equal(git(d, 'init', '-q').status, 0);
  assert.equal(git(d, 'add', '.').status, 0);
  assert.equal(git(d, 'commit', '-q', '-m', 'first').status, 0);
  symlinkSync('../../scripts/hook.sh', join(d, '.git/hooks/post-commit'));
  mkdirSync(join(d, 'sub'));
  writeFileSync(join(d, 'sub/a.txt'), 'a\n');
  assert.equal(git(join(d, 'sub'), 'init', '-q').status, 0);
  assert.equal(git(join(d, 'sub'), 'add', '.').status, 0);
  assert.equal(git(join(d, 'sub'), 'commit', '-q', '-m', 'first').status, 0);
  rmSync(join(d, 'sub/.git/hooks'), { recursive: true, force: true });
  // what the agent has to plant: an executable hook, a directory of hooks, a workflow
  writeFileSync(join(d, 'payload.sh'), hook);
  chmodSync(join(d, 'payload.sh'), 0o755);
  mkdirSync(join(d, 'hk'));
  for (const h of ['pre-commit', 'post-commit']) {
    writeFileSync(join(d, 'hk', h), hook);
    chmodSync(join(d, 'hk', h), 0o755);
  }
  mkdirSync(join(d, 'wf/workflows'), { recursive: true });
  writeFileSync(join(d, 'wf/workflows/x.yml'), 'on: push\njobs: {}\n');
  // a hooks directory that is a link (husky's, for core.hooksPath=.husky), an editor's folder
  mkdirSync(join(d, 'hooksdir'));
  symlinkSync('hooksdir', join(d, '.husky'));
  mkdirSync(join(d, '.vscode'));
  writeFileSync(join(d, 'tasks.json'), '{"version":"2.0.0","tasks":[{"label":"x","command":"true","runOptions":{"runOn":"folderOpen"}}]}\n');
  // one entry over what a move's landing check looks at (10,000)
  if (mode === 'unsupervised') {
    mkdirSync(join(d, 'big'));
    for (let i = 0; i <= 10000; i++) writeFileSync(join(d, 'big', 'f' + i), '');
  }
  mkdirSync(join(d, 'plain/deeper'), { recursive: true });
  writeFileSync(join(d, 'plain/deeper/c.txt'), 'c\n');
  // a commondir pointing git at a directory whose config runs an fsmonitor
  mkdirSync(join(d, 'evil/objects'), { recursive: true });
  mkdirSync(join(d, 'evil/refs'));
  writeFileSync(join(d, 'evil/config'), `[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch ${marker}; false"\n`);
  writeFileSync(join(d, 'commondir.txt'), '../evil\n');
}

before(async () => {
  K = await startSandboxServer('jailbox-sandbox:landing');
  for (const mode of ['unsupervised', 'supervised']) {
    const marker = join(markers, mode + '.ran');
    const S = await K.openSession((d) => buildWorkspace(d, marker, mode), { mode });
    const buyer = await K.connect(S.buyerToken);
    const agent = await K.connect(S.agentToken);
    sessions[mode] = { S, agent, buyer, marker };
  }
});

after(async () => {
  rmSync(markers, { recursive: true, force: true });
  if (!K) return;
  K.closeSockets();
  const log = K.srv.log();
  await K.srv.stop();
  assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
});

// the planting calls: each must be refused `flagged` by the landing check
const planted = [
  { tool: 'move', args: { source: 'payload.sh', destination: '.git/hooks/pre-commit' }, landing: '.git/hooks/pre-commit', rule: 'git_hooks' },
  { tool: 'move', args: { source: 'hk', destination: 'sub/.git/hooks' }, landing: 'sub/.git/hooks', rule: 'git_hooks' },
  { tool: 'move', args: { source: 'wf', destination: '.github' }, landing: '.github/workflows', rule: 'ci_definition' },
  { tool: 'mkdir', args: { path: '.git/hooks/x' }, landing: '.git/hooks/x', rule: 'git_hooks' },
  { tool: 'move', args: { source: '.git/config', destination: 'config.bak' }, landing: '.git/config', rule: 'git_config' },
  // the root repository's post-commit hook is a symlink to scripts/hook.sh (0755): a write
  // there would keep its execute bit and run at the buyer's next commit
  { tool: 'write', args: { path: 'scripts/hook.sh', content: '#!/bin/sh\ntouch MARKER\n' }, landing: 'scripts/hook.sh', rule: 'git_hooks' },
  // .husky is a link to hooksdir: what lands in hooksdir lands in .husky
  { tool: 'write', args: { path: 'hooksdir/pre-commit', content: '#!/bin/sh\ntouch MARKER\n' }, landing: 'hooksdir/pre-commit', rule: 'git_hooks' },
  { tool: 'mkdir', args: { path: 'hooksdir/_' }, landing: 'hooksdir/_', rule: 'git_hooks' },
  // a VS Code task that runs when the folder opens
  { tool: 'move', args: { source: 'tasks.json', destination: '.vscode/tasks.json' }, landing: '.vscode/tasks.json', rule: 'editor_config' },
  // an entry that leaves a covered place: a hooks directory's link, git's whole directory
  { tool: 'delete', args: { path: '.husky' }, landing: '.husky', rule: 'git_hooks' },
  { tool: 'delete', args: { path: '.git', recursive: true }, landing: '.git', rule: 'git_config' },
  { tool: 'delete', args: { path: 'sub/.git/config' }, landing: 'sub/.git/config', rule: 'git_config' },
  // git's own data by hand: a replacement ref (git shows and checks out another commit), a
  // packed-refs line, HEAD naming another ref — the file tools never write under .git
  { tool: 'write', args: { path: '.git/packed-refs', content: '0000000000000000000000000000000000000000 refs/replace/1111111111111111111111111111111111111111\n' }, landing: '.git/packed-refs', rule: 'git_config' },
  { tool: 'mkdir', args: { path: '.git/refs/replace' }, landing: '.git/refs/replace', rule: 'git_config' },
  // git takes config and hooks from the directory .git/commondir names
  { tool: 'move', args: { source: 'commondir.txt', destination: '.git/commondir' }, landing: '.git/commondir', rule: 'git_config' },
];

// one planting call of `mode`'s session: refused flagged, alerted, audited, never asked
async function refusedLanding(mode, p) {
  const { S, agent, buyer, marker } = sessions[mode];
  const args = { ...p.args };
  if (p.tool === 'write') args.content = args.content.replace('MARKER', marker);
  const what = `${mode} ${p.tool} ${JSON.stringify(p.args)}`;
  {
    // a refusal is answered at once; a call that waits for the buyer is a failure too
    const e = toolFailure(await K.call(agent, p.tool, args, 15000));
    assert.equal(e?.data?.reason, 'flagged', `${what}: ${JSON.stringify(e)}`);
    assert.match(e.message, new RegExp(p.rule), what);
    const path = p.args.path ?? p.args.source;
    const alert = await K.waitEvent(buyer, 'jailbox:security_alert', (x) => x.kind === 'flagged_landing' && x.path === path);
    assert.equal(alert.tool, p.tool, what);
    assert.ok(alert.landing.startsWith(p.landing), `${what}: ${JSON.stringify(alert)}`);
    assert.ok(alert.rules.includes(p.rule), `${what}: ${JSON.stringify(alert)}`);
    assert.ok(!buyer.events.some((x) => x.event === 'jailbox:approval_request' && x.payload.path === path), what + ': approval asked');
    const rows = (await K.srv.db.query(
      "SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = $2 AND path = $3",
      [S.jobId, p.tool, path])).rows.map((r) => r.d).filter((d) => d.decidedBy === 'scanner');
    assert.equal(rows.length, 1, what + ': audit entries ' + JSON.stringify(rows));
    assert.deepEqual([rows[0].error, rows[0].ok, rows[0].decision], ['flagged', false, 'flagged'], what);
    assert.ok(rows[0].rules.includes(p.rule), what);
  }
}

async function refusedLandings(mode) {
  const { S } = sessions[mode];
  const failed = []; // every case is tried, so that each one is seen to hold (or not)
  for (const p of planted) await refusedLanding(mode, p).catch((e) => failed.push(e.message.split('\n')[0]));
  assert.deepEqual(failed, [], mode);
  const d = S.dir;
  // nothing moved or was made
  for (const f of ['payload.sh', 'hk/pre-commit', 'wf/workflows/x.yml', '.git/config', 'tasks.json', '.husky', '.git/HEAD', 'sub/.git/config']) assert.ok(existsSync(join(d, f)), `${mode}: ${f} moved or deleted`);
  for (const f of ['.git/hooks/pre-commit', 'sub/.git/hooks', '.github', '.git/hooks/x', 'config.bak', 'hooksdir/pre-commit', 'hooksdir/_', '.vscode/tasks.json', '.git/commondir']) assert.ok(!existsSync(join(d, f)), `${mode}: ${f} made`);
  const ops = await K.srv.db.query("SELECT count(*)::int AS n FROM ops WHERE job_id = $1 AND tool IN ('move', 'mkdir', 'write', 'delete')", [S.jobId]);
  assert.equal(ops.rows[0].n, 0, mode + ': a refused landing was stored as an op');
}

// the buyer's own git on the host, in both repositories: runs nothing of the agent's
function buyerGit(mode) {
  const { S, marker } = sessions[mode];
  for (const dir of [S.dir, join(S.dir, 'sub')]) {
    const st = git(dir, 'status');
    assert.equal(st.status, 0, st.stderr);
    const c = git(dir, 'commit', '-q', '--allow-empty', '-m', 'buyer');
    assert.equal(c.status, 0, c.stderr);
  }
  assert.ok(!existsSync(marker), `${mode}: the buyer's git ran the agent's hook`);
}

test('unsupervised: planting hooks, config and CI by move, mkdir and a hook symlink\'s target is refused flagged, alerted and audited', { timeout: 120000 }, async () => {
  await refusedLandings('unsupervised');
});

test('supervised: the same is refused before any approval is asked', { timeout: 120000 }, async () => {
  await refusedLandings('supervised');
});

test('unsupervised: clean moves and mkdirs still run (a directory with a deeper tree, a file, a new directory)', { timeout: 60000 }, async () => {
  const { S, agent } = sessions.unsupervised;
  await K.ok(agent, 'mkdir', { path: 'src/new' });
  await K.ok(agent, 'move', { source: 'notes.txt', destination: 'src/notes.txt' });
  await K.ok(agent, 'move', { source: 'plain', destination: 'src/plain' });
  assert.ok(existsSync(join(S.dir, 'src/new')));
  assert.ok(existsSync(join(S.dir, 'src/notes.txt')));
  assert.ok(existsSync(join(S.dir, 'src/plain/deeper/c.txt')));
});

test('a landing with a long path still alerts the buyer (its paths hashed in the event, whole in the audit entry)', { timeout: 60000 }, async () => {
  const { S, agent, buyer } = sessions.unsupervised;
  const path = '.git/hooks/' + Array.from({ length: 15 }, (_, i) => String(i).padEnd(250, 'x')).join('/');
  await K.refused(agent, 'mkdir', { path }, 'flagged');
  const alert = await K.waitEvent(buyer, 'jailbox:security_alert', (x) => x.kind === 'flagged_landing' && x.tool === 'mkdir' && x.path === path);
  assert.match(alert.landing, /^sha256:[0-9a-f]{64}$/);
  const rows = (await K.srv.db.query(
    "SELECT jb_audit_details(canonical) AS d FROM audit_entries WHERE job_id = $1 AND operation = 'mkdir' AND path = $2",
    [S.jobId, path])).rows;
  assert.equal(rows[0]?.d?.landing, path);
});

test('a directory too large to check where it lands is refused, not moved', { timeout: 60000 }, async () => {
  const { S, agent } = sessions.unsupervised;
  const t0 = Date.now();
  const e = await K.refused(agent, 'move', { source: 'big', destination: 'big2' }, 'too_large');
  console.log(`# the refusal of a move of 10,001 entries took ${Date.now() - t0} ms`);
  assert.match(e.message, /move it in parts/);
  assert.ok(existsSync(join(S.dir, 'big/f0')) && !existsSync(join(S.dir, 'big2')));
});

test('supervised: a clean directory move becomes a pending approval and runs once approved', { timeout: 60000 }, async () => {
  const { S, agent, buyer } = sessions.supervised;
  const answer = K.call(agent, 'move', { source: 'plain', destination: 'plain2' }, 60000);
  const req = await Promise.race([
    K.waitEvent(buyer, 'jailbox:approval_request', (p) => p.tool === 'move' && p.path === 'plain'),
    answer.then((r) => { throw new Error('answered before any approval: ' + JSON.stringify(r)); }),
  ]);
  const ack = await buyer.timeout(10000).emitWithAck('jailbox:approve', { opId: req.opId });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  const r = await answer;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.ok(existsSync(join(S.dir, 'plain2/deeper/c.txt')));
});

test('afterwards the buyer\'s git status and git commit on the host run nothing of the agent\'s', { timeout: 60000 }, () => {
  buyerGit('unsupervised');
  buyerGit('supervised');
});

test('a hooks directory the buyer\'s git config names (core.hooksPath) is covered as .git/hooks: a write, a mkdir and a move there are refused; the buyer\'s commit runs nothing', { timeout: 120000 }, async () => {
  const marker = join(markers, 'hookspath.ran');
  const S = await K.openSession((d) => {
    mkdirSync(join(d, 'tools/hooks'), { recursive: true });
    writeFileSync(join(d, 'tools/hooks/README'), 'hooks\n');
    writeFileSync(join(d, 'payload.sh'), `#!/bin/sh\ntouch ${marker}\n`);
    chmodSync(join(d, 'payload.sh'), 0o755);
    assert.equal(git(d, 'init', '-q').status, 0);
    assert.equal(git(d, 'config', 'core.hooksPath', 'tools/hooks').status, 0);
    assert.equal(git(d, 'add', '.').status, 0);
    assert.equal(git(d, 'commit', '-q', '-m', 'first').status, 0);
    // a nested repository whose hooks are elsewhere too
    mkdirSync(join(d, 'lib/inner/hk'), { recursive: true });
    assert.equal(git(join(d, 'lib/inner'), 'init', '-q').status, 0);
    assert.equal(git(join(d, 'lib/inner'), 'config', 'core.hooksPath', 'hk').status, 0);
  }, { mode: 'unsupervised' });
  const flags = (await K.sessionOf(S.jobId)).walls.prescan.flagged;
  assert.ok(flags.some((f) => f.kind === 'landing_link' && f.path === 'tools/hooks' && f.link === '.git/hooks'), JSON.stringify(flags));
  const agent = await K.connect(S.agentToken);
  for (const [tool, args] of [['write', { path: 'tools/hooks/pre-commit', content: `#!/bin/sh\ntouch ${marker}\n` }],
    ['mkdir', { path: 'tools/hooks/x' }], ['move', { source: 'payload.sh', destination: 'tools/hooks/pre-commit' }],
    ['write', { path: 'lib/inner/hk/pre-commit', content: `#!/bin/sh\ntouch ${marker}\n` }]]) {
    const e = toolFailure(await K.call(agent, tool, args, 15000));
    assert.equal(e?.data?.reason, 'flagged', `${tool}: ${JSON.stringify(e)}`);
  }
  // the rest of the workspace is the agent's as before
  await K.ok(agent, 'write', { path: 'tools/notes.txt', content: 'x\n' });
  const c = git(S.dir, 'commit', '-q', '--allow-empty', '-m', 'buyer');
  assert.equal(c.status, 0, c.stderr);
  assert.ok(!existsSync(marker), 'the buyer\'s commit ran the agent\'s hook');
});
