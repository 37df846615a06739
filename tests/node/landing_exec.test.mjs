// landing_exec.test.mjs — the landing check over what a writable exec leaves (real stack:
// socket.io agent → jailboxd → worker → the session's spawner in gVisor + Docker), on a
// workspace holding a real git repository made on the host. In both modes a command that plants
// a git hook (+x), adds core.fsmonitor/hooksPath to .git/config and writes a CI workflow has
// each undone before its answer (the hook and the workflow removed, the config restored byte
// for byte, the changes marked, a security alert), and the buyer's `git status` / `git commit`
// on the host afterwards run nothing of the agent's. Also: two commands assembling a link
// that leads out (the second one's link removed), the pre-scan flagging such a link, a walk
// past its entry bound (incomplete: an alert, writable commands held until the buyer clears
// them over REST or the socket), a hundred sparse 1 GiB files (each later writable command
// stays fast), and a normal writable command that keeps its effect. Needs root, Docker with
// runsc.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, realpathSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSandboxServer } from './lib/agent.mjs';

const IMAGE = 'jailbox-sandbox:landing';
const MARKS = mkdtempSync(join(tmpdir(), 'jb-landing-')); // what the agent's hook would touch
let K, srv;

const git = (dir, ...args) => execFileSync('git', ['-C', dir, ...args], {
  env: { ...process.env, GIT_AUTHOR_NAME: 'b', GIT_AUTHOR_EMAIL: 'b@x', GIT_COMMITTER_NAME: 'b', GIT_COMMITTER_EMAIL: 'b@x', GIT_CONFIG_NOSYSTEM: '1', HOME: MARKS },
  stdio: ['ignore', 'pipe', 'pipe'],
}).toString();

// a workspace with a git repository and one commit, made on the host
const repo = (d) => {
  mkdirSync(join(d, 'src'));
  writeFileSync(join(d, 'src/a.c'), 'int a;\n');
  git(d, 'init', '-q');
  git(d, 'add', '.');
  git(d, 'commit', '-qm', 'one');
};

before(async () => {
  K = await startSandboxServer(IMAGE, {
    JAILBOX_APPROVAL_TIMEOUT: '60', JAILBOX_ESCAPE_ABORT: 'none',
    JAILBOX_EFFECTS_MAX_ENTRIES: '400', // the incomplete case stays small
    JAILBOX_EFFECTS_SWEEP_MAX_ENTRIES: '1500', // a sweep past 900 entries is whole, past 1,600 cut
  }, [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/printf', '/usr/bin/chmod', '/usr/bin/mkdir',
    '/usr/bin/cat', '/usr/bin/ln', '/usr/bin/rmdir', '/usr/bin/touch', '/usr/bin/echo', '/usr/bin/seq']);
  srv = K.srv;
});

after(async () => {
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// opens a session in `mode` on `build`, with its agent and buyer sockets
async function session(build, mode) {
  const S = await K.openSession(build, { mode });
  S.agent = await K.connect(S.agentToken);
  S.buyer = await K.connect(S.buyerToken);
  return S;
}

// ends S (its sandbox gone, so that host git runs the hooks as they are: while it is up a
// hook may fail "Text file busy" and a check would pass for nothing)
async function end(S) {
  const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/abort`, { token: S.buyerToken });
  assert.equal(r.status, 200, r.text);
  await new Promise((res) => setTimeout(res, 500));
}

// a writable exec of `command` in S, approved by the buyer when the session is supervised
async function writable(S, command) {
  const call = K.call(S.agent, 'exec', { command, writable: true });
  if (S.mode === 'supervised') {
    const ev = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.argv?.includes(command));
    const a = await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${ev.opId}`, { token: S.buyerToken });
    assert.equal(a.status, 200, a.text);
  }
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  return r.result.structuredContent;
}

// the command that leaves a hook, a git config change and a CI workflow (marks under `mode`)
const landing = (mode) =>
  `printf '#!/bin/sh\\ntouch ${join(MARKS, `hook-${mode}`)}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; ` +
  `printf '[core]\\n\\tfsmonitor = touch ${join(MARKS, `fsmonitor-${mode}`)}; false\\n\\thooksPath = .git/hooks\\n' >> .git/config; ` +
  `mkdir -p .github/workflows; echo 'on: push' > .github/workflows/x.yml; echo 'int b;' > src/a.c`;

test('supervised: the same command\'s hook, git config change and CI workflow are held back in its changeset; approving all lands only the source file; git on the host runs nothing of the agent\'s', async () => {
  const S = await session(repo, 'supervised');
  const config = readFileSync(join(S.dir, '.git/config'));
  const command = landing('supervised');
  const call = K.call(S.agent, 'exec', { command, writable: true });
  const ev = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'exec' && p.argv?.includes(command));
  assert.equal((await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${ev.opId}`, { token: S.buyerToken })).status, 200);
  const cs = await K.waitEvent(S.buyer, 'jailbox:approval_request', (p) => p.tool === 'changeset' && p.execOpId === ev.opId, 60000);
  const page = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops/${cs.opId}/changeset?limit=100`, { token: S.buyerToken });
  assert.equal(page.status, 200, page.text);
  const by = Object.fromEntries(page.json.files.map((f) => [f.path, f]));
  for (const p of ['.git/hooks/pre-commit', '.git/config', '.github/workflows/x.yml'])
    assert.equal(by[p]?.approvable, false, `${p}: ${JSON.stringify(by[p])}`);
  assert.equal(by['src/a.c']?.approvable, true, JSON.stringify(by['src/a.c']));
  assert.equal((await srv.req('POST', `/v1/jailbox/${S.jobId}/approve/${cs.opId}`, { token: S.buyerToken, body: {} })).status, 200);
  const r = await call;
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
  assert.equal(r.result.structuredContent.changeset.state, 'applied', JSON.stringify(r.result.structuredContent.changeset));
  assert.ok(!existsSync(join(S.dir, '.git/hooks/pre-commit')));
  assert.ok(!existsSync(join(S.dir, '.github/workflows')));
  assert.deepEqual(readFileSync(join(S.dir, '.git/config')), config, 'the config byte for byte');
  assert.equal(readFileSync(join(S.dir, 'src/a.c'), 'utf8'), 'int b;\n');
  await end(S);
  git(S.dir, 'status');
  git(S.dir, 'commit', '-qam', 'two');
  assert.ok(!existsSync(join(MARKS, 'hook-supervised')), 'the agent\'s hook ran on the host');
  assert.ok(!existsSync(join(MARKS, 'fsmonitor-supervised')), 'the agent\'s fsmonitor ran on the host');
});

for (const mode of ['unsupervised']) {
  test(`${mode}: a hook, a git config change and a CI workflow left by a command are undone; git on the host runs nothing of the agent's`, async () => {
    const S = await session(repo, mode);
    S.mode = mode;
    const config = readFileSync(join(S.dir, '.git/config'));
    const hookMark = join(MARKS, `hook-${mode}`), fsMark = join(MARKS, `fsmonitor-${mode}`);
    const r = await writable(S, landing(mode));
    const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
    // undone before the answer, and marked
    assert.deepEqual([by['.git/hooks/pre-commit']?.flagged, by['.git/hooks/pre-commit']?.removed], ['git_hooks', true], JSON.stringify(r.changes));
    assert.deepEqual([by['.git/config']?.flagged, by['.git/config']?.restored], ['git_config', true], JSON.stringify(by['.git/config']));
    assert.deepEqual([by['.github/workflows/x.yml']?.flagged, by['.github/workflows/x.yml']?.removed], ['ci_definition', true]);
    assert.equal(by['src/a.c']?.change, 'modified');
    assert.equal(by['src/a.c'].removed, undefined);
    assert.ok(!existsSync(join(S.dir, '.git/hooks/pre-commit')));
    assert.ok(!existsSync(join(S.dir, '.github/workflows')));
    assert.deepEqual(readFileSync(join(S.dir, '.git/config')), config, 'the config byte for byte');
    // the normal effect stays
    assert.equal(readFileSync(join(S.dir, 'src/a.c'), 'utf8'), 'int b;\n');
    const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
    assert.match(alert.detail, /^exec: landing (git_hooks|git_config|ci_definition) /, JSON.stringify(alert));
    // the buyer's git on the host, the session ended (git() throws unless git exits 0)
    await end(S);
    git(S.dir, 'status');
    git(S.dir, 'commit', '-qam', 'two');
    assert.ok(!existsSync(hookMark), 'the agent\'s hook ran on the host');
    assert.ok(!existsSync(fsMark), 'the agent\'s fsmonitor ran on the host');
  });
}

test('unsupervised: a normal writable command keeps its effect (no landing, no alert)', async () => {
  const S = await session(repo, 'unsupervised');
  const r = await writable(S, 'echo x > src/b.c; mkdir -p docs; echo d > docs/r.md; chmod +x src/b.c');
  assert.deepEqual(r.changes.filter((c) => c.flagged), []);
  assert.equal(readFileSync(join(S.dir, 'src/b.c'), 'utf8'), 'x\n');
  assert.equal(readFileSync(join(S.dir, 'docs/r.md'), 'utf8'), 'd\n');
  await new Promise((res) => setTimeout(res, 300));
  assert.equal(S.buyer.events.filter((e) => e.event === 'jailbox:security_alert').length, 0);
});

test('two commands assembling a link that leads out: the second one\'s link is removed, with an alert', async () => {
  const S = await session(repo, 'unsupervised');
  // 1: p/q/../.. is the workspace itself, through a real directory
  let r = await writable(S, 'mkdir -p p/q; ln -s p/q/../.. up');
  assert.deepEqual(r.changes.filter((c) => c.removed), []);
  // 2: p/q becomes a link to p itself (inside): `up` now climbs one level above the root
  r = await writable(S, 'rmdir p/q; ln -s . p/q');
  const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
  assert.deepEqual([by['p/q']?.flagged, by['p/q']?.removed], ['symlink_outside', true], JSON.stringify(r.changes));
  assert.throws(() => lstatSync(join(S.dir, 'p/q')));
  assert.equal(readlinkSync(join(S.dir, 'up')), 'p/q/../..', 'the earlier link stays (it dangles now)');
  const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
  assert.match(alert.detail, /symlink_outside p\/q/);
});

test('the pre-scan judges links as they resolve: a link assembled out is flagged in the next session', async () => {
  const S = await K.openSession((d) => {
    mkdirSync(join(d, 'p'));
    symlinkSync('.', join(d, 'p/q'));
    symlinkSync('p/q/../..', join(d, 'up')); // lexically the root itself; resolved, above it
    symlinkSync('p/q/q', join(d, 'in'));
  }, { mode: 'unsupervised' });
  const flagged = (await K.sessionOf(S.jobId)).walls.prescan.flagged;
  assert.deepEqual(flagged, [{ path: 'up', kind: 'symlink_outside' }], JSON.stringify(flagged));
});

test('a walk past its bound makes the effects incomplete: an alert at once, and writable commands held until the buyer clears it', async () => {
  const S = await session(repo, 'unsupervised');
  const r = await writable(S, 'echo x > .envrc; mkdir many; cd many; for i in $(seq 1 1600); do echo > f$i; done');
  assert.equal(r.changesIncomplete, true, JSON.stringify(r).slice(0, 300));
  const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
  // incomplete is said first, whatever else was found (a landing seen before the cut)
  assert.match(alert.detail, /^exec: effects incomplete \(entries\), sweep cut \(entries\)/, alert.detail);
  // held: a writable command is refused (audited), a read-only one still runs
  const f = await K.refused(S.agent, 'exec', { command: 'echo y > src/c.c', writable: true }, 'denied');
  assert.match(f.message, /held/);
  assert.ok(!existsSync(join(S.dir, 'src/c.c')));
  assert.equal((await K.ok(S.agent, 'exec', { argv: ['cat', 'src/a.c'] })).stdout, 'int a;\n');
  // only the buyer clears it; then writable commands run again
  let c = await srv.req('POST', `/v1/jailbox/${S.jobId}/effects/clear`, { token: S.agentToken });
  assert.ok([401, 403].includes(c.status), c.text);
  c = await srv.req('POST', `/v1/jailbox/${S.jobId}/effects/clear`, { token: S.buyerToken, body: { reason: 'looked at many/' } });
  assert.equal(c.status, 200, c.text);
  assert.deepEqual(c.json, { jobId: S.jobId, cleared: true });
  await writable(S, 'echo y > src/c.c');
  assert.equal(readFileSync(join(S.dir, 'src/c.c'), 'utf8'), 'y\n');
  // (still over the bound: held again) — the socket form clears it too
  const ack = await S.buyer.timeout(10000).emitWithAck('jailbox:effects_clear', {});
  assert.deepEqual(ack, { ok: true, jobId: S.jobId, cleared: true });
  const audit = await srv.req('GET', `/v1/jailbox/${S.jobId}/audit`, { token: S.buyerToken });
  assert.match(audit.text, /"operation":"effects_clear"/);
});

test('a hundred sparse 1 GiB files: each later writable command stays fast', async () => {
  const S = await session((d) => {
    repo(d);
    for (let i = 0; i < 100; i++) execFileSync('truncate', ['-s', '1G', join(d, `sparse${i}`)]);
  }, 'unsupervised');
  const times = [];
  for (let i = 0; i < 3; i++) {
    const t0 = Date.now();
    const r = await writable(S, `echo ${i} > n${i}`);
    times.push(Date.now() - t0);
    assert.equal(r.changesIncomplete, undefined);
  }
  const effects = [...srv.log().matchAll(/"msg":"exec timings".*?"effects":([\d.]+)/g)].map((m) => +m[1]);
  console.log('# sparse: writable command wall ms', times, 'effects ms (last 3)', effects.slice(-3));
  for (const t of times) assert.ok(t < 10000, `a writable command took ${t} ms`);
});

test('writing to the target of a covered link lands: the buyer\'s hook targets are restored, a dangling one made is removed; git on the host runs nothing', async () => {
  const S = await session((d) => {
    repo(d);
    mkdirSync(join(d, 'scripts'));
    writeFileSync(join(d, 'scripts/hook.sh'), '#!/bin/sh\nexit 0\n');
    chmodSync(join(d, 'scripts/hook.sh'), 0o755);
    writeFileSync(join(d, 'scripts/tool.sh'), '#!/bin/sh\nexit 0\n');
    chmodSync(join(d, 'scripts/tool.sh'), 0o644);
    symlinkSync('../../scripts/hook.sh', join(d, '.git/hooks/post-commit'));
    symlinkSync('../../scripts/tool.sh', join(d, '.git/hooks/pre-commit'));
    symlinkSync('../../gen/hook.sh', join(d, '.git/hooks/commit-msg')); // dangling
  }, 'unsupervised');
  const m = (k) => join(MARKS, `target-${k}`);
  const r = await writable(S,
    `printf '#!/bin/sh\\ntouch ${m(1)}\\n' > scripts/hook.sh; ` +
    `printf '#!/bin/sh\\ntouch ${m(2)}\\n' > scripts/tool.sh; chmod +x scripts/tool.sh; ` +
    `mkdir -p gen; printf '#!/bin/sh\\ntouch ${m(3)}\\n' > gen/hook.sh; chmod +x gen/hook.sh; echo ok > scripts/other.sh`);
  const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
  assert.deepEqual([by['scripts/hook.sh']?.flagged, by['scripts/hook.sh']?.restored], ['git_hooks', true], JSON.stringify(r.changes));
  assert.deepEqual([by['scripts/tool.sh']?.flagged, by['scripts/tool.sh']?.restored], ['git_hooks', true]);
  assert.deepEqual([by['gen/hook.sh']?.flagged, by['gen/hook.sh']?.removed], ['git_hooks', true]);
  assert.equal(by['scripts/other.sh']?.flagged, undefined, 'an entry no covered link reaches stays');
  assert.equal(readFileSync(join(S.dir, 'scripts/hook.sh'), 'utf8'), '#!/bin/sh\nexit 0\n');
  assert.equal(statSync(join(S.dir, 'scripts/tool.sh')).mode & 0o111, 0, 'the execute bit stays off');
  assert.ok(!existsSync(join(S.dir, 'gen/hook.sh')));
  assert.equal(readFileSync(join(S.dir, 'scripts/other.sh'), 'utf8'), 'ok\n');
  const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
  assert.match(alert.detail, /^exec: landing git_hooks /, alert.detail);
  await end(S);
  git(S.dir, 'add', '-A');
  git(S.dir, 'commit', '-qm', 'two');
  for (const k of [1, 2, 3]) assert.ok(!existsSync(m(k)), `the agent's hook ${k} ran on the host`);
});

test('the places the buyer\'s git config names (core.hooksPath, an included config file) are covered as .git/hooks and .git/config: a command\'s hook and fsmonitor there are undone; git on the host runs nothing', async () => {
  const S = await session((d) => {
    repo(d);
    mkdirSync(join(d, 'tools/hooks'), { recursive: true });
    writeFileSync(join(d, 'tools/hooks/README'), 'hooks\n');
    mkdirSync(join(d, '.shared'));
    writeFileSync(join(d, '.shared/gitconfig'), '[diff]\n\trenames = true\n');
    git(d, 'config', 'core.hooksPath', 'tools/hooks');
    git(d, 'config', 'include.path', '../.shared/gitconfig');
    // a nested repository with hooks of its own elsewhere
    mkdirSync(join(d, 'vendor/lib/h'), { recursive: true });
    writeFileSync(join(d, 'vendor/lib/x.c'), 'int x;\n');
    git(join(d, 'vendor/lib'), 'init', '-q');
    git(join(d, 'vendor/lib'), 'config', 'core.hooksPath', 'h');
    git(join(d, 'vendor/lib'), 'add', '.');
    git(join(d, 'vendor/lib'), 'commit', '-qm', 'one');
  }, 'unsupervised');
  const shared = readFileSync(join(S.dir, '.shared/gitconfig'));
  const m = (k) => join(MARKS, `places-${k}`);
  const r = await writable(S,
    `printf '#!/bin/sh\\ntouch ${m(1)}\\n' > tools/hooks/pre-commit; chmod +x tools/hooks/pre-commit; ` +
    `printf '[core]\\n\\tfsmonitor = touch ${m(2)}; false\\n' >> .shared/gitconfig; echo 'int c;' > src/a.c; ` +
    `printf '#!/bin/sh\\ntouch ${m(3)}\\n' > vendor/lib/h/pre-commit; chmod +x vendor/lib/h/pre-commit`);
  const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
  assert.deepEqual([by['tools/hooks/pre-commit']?.flagged, by['tools/hooks/pre-commit']?.removed], ['git_hooks', true], JSON.stringify(r.changes));
  assert.deepEqual([by['.shared/gitconfig']?.flagged, by['.shared/gitconfig']?.restored], ['git_config', true], JSON.stringify(by['.shared/gitconfig']));
  assert.equal(by['src/a.c']?.flagged, undefined);
  assert.deepEqual([by['vendor/lib/h/pre-commit']?.flagged, by['vendor/lib/h/pre-commit']?.removed], ['git_hooks', true], JSON.stringify(by['vendor/lib/h/pre-commit']));
  assert.ok(!existsSync(join(S.dir, 'tools/hooks/pre-commit')));
  assert.deepEqual(readFileSync(join(S.dir, '.shared/gitconfig')), shared, 'the included config byte for byte');
  await end(S);
  git(S.dir, 'status');
  git(S.dir, 'commit', '-qam', 'two');
  git(join(S.dir, 'vendor/lib'), 'commit', '-q', '--allow-empty', '-m', 'two');
  for (const k of [1, 2, 3]) assert.ok(!existsSync(m(k)), `the agent's ${k === 2 ? 'fsmonitor' : 'hook'} ${k} ran on the host`);
});

test('a new link at a covered directory name, or one through which an entry lies at a covered path (.config -> . with mise/config.toml), lands (it is removed); the buyer\'s untouched links and an ordinary new link stay', async () => {
  const S = await session((d) => {
    repo(d);
    mkdirSync(join(d, 'circle'));
    writeFileSync(join(d, 'circle/config.yml'), 'version: 2\n');
    symlinkSync('circle', join(d, '.circleci')); // the buyer's, at a covered name
    symlinkSync('src', join(d, 'lib'));
  }, 'unsupervised');
  const r = await writable(S,
    `mkdir vs wf wf/workflows dc hk; echo '{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' > vs/tasks.json; ln -s vs .vscode; ` +
    `echo 'on: push' > wf/workflows/x.yml; ln -s wf .github; echo '{}' > dc/devcontainer.json; ln -s dc .devcontainer; ` +
    `printf '#!/bin/sh\\n' > hk/pre-commit; ln -s hk .husky; mkdir mise; echo '[tasks]' > mise/config.toml; ln -s . .config; ln -s src inc`);
  const by = Object.fromEntries(r.changes.map((c) => [c.path, c]));
  for (const [p, rule] of [['.vscode', 'editor_config'], ['.github', 'ci_definition'], ['.devcontainer', 'editor_config'], ['.husky', 'git_hooks'], ['.config', 'env_loader']]) {
    assert.deepEqual([by[p]?.flagged, by[p]?.removed], [rule, true], `${p}: ${JSON.stringify(r.changes)}`);
    assert.throws(() => lstatSync(join(S.dir, p)), `${p} stays`);
  }
  assert.equal(readlinkSync(join(S.dir, '.circleci')), 'circle');
  assert.equal(readFileSync(join(S.dir, 'circle/config.yml'), 'utf8'), 'version: 2\n');
  assert.equal(readlinkSync(join(S.dir, 'lib')), 'src');
  assert.equal(readlinkSync(join(S.dir, 'inc')), 'src');
  assert.equal(by.inc?.flagged, undefined);
});

test('what lies past a cut walk is swept: every landing removed, the alert says the walk was cut, no hold when the sweep is whole', async () => {
  const S = await session(repo, 'unsupervised');
  const mark = join(MARKS, 'swept');
  const r = await writable(S,
    'for d in $(seq 1 150); do mkdir d$d; for i in 1 2 3 4 5; do echo > d$d/f$i; done; done; ' +
    `printf '#!/bin/sh\\ntouch ${mark}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; echo 'touch ${mark}' > .envrc; ` +
    "mkdir -p .github/workflows .vscode; echo 'on: push' > .github/workflows/x.yml; echo '{}' > .vscode/tasks.json");
  assert.equal(r.changesIncomplete, true);
  assert.equal(r.landingSwept, true, JSON.stringify(r).slice(0, 300));
  for (const p of ['.git/hooks/pre-commit', '.envrc', '.github/workflows/x.yml', '.vscode/tasks.json'])
    assert.ok(!existsSync(join(S.dir, p)), `${p} stays`);
  const alert = await K.waitEvent(S.buyer, 'jailbox:security_alert', (p) => p.kind === 'denied_path');
  assert.match(alert.detail, /^exec: walk cut \(entries\), the rest swept for landings: landing /, alert.detail);
  // not held: the next writable command runs; its walk before is cut too, so its pre-image is
  // taken by a sweep and the rest swept after it: a landing is undone, and still nothing held
  const r2 = await writable(S, "echo y > src/c.c; echo 'touch x' > .envrc");
  assert.equal(r2.landingSwept, true, JSON.stringify(r2).slice(0, 300));
  assert.ok(!existsSync(join(S.dir, '.envrc')));
  assert.equal(readFileSync(join(S.dir, 'src/c.c'), 'utf8'), 'y\n');
  await writable(S, 'echo z > src/d.c');
  assert.equal(readFileSync(join(S.dir, 'src/d.c'), 'utf8'), 'z\n');
});
