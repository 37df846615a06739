// images.test.mjs — a session's sandbox image, end to end with real dockerd + runsc + bwrap:
// the minimal image (deploy/sandbox-image/build.sh) and the one with a Debian userland and a
// toolchain (build.sh --userland, debootstrapped once and cached under var/sandbox-image/),
// chosen at open from the operator's allowlist (JAILBOX_SANDBOX_IMAGES), launched by the
// worker and named in the session contract with its Docker id and content digest. A name
// outside the allowlist is refused before anything is stored or launched; an allowed image
// the daemon does not have fails the launch with a reason naming it.
// Needs root, Docker with runsc registered, debootstrap and deb.debian.org for the first
// --userland build (deploy/install-deps.sh, deploy/start-dockerd.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startServer, JAILBOXD } from './lib/server.mjs';
import { ROOT, docker, control } from './lib/jail.mjs';

const SUFFIX = process.env.JB_IMAGE_SUFFIX ?? ''; // keeps the images of parallel checkouts apart
const MINIMAL = 'jailbox-sandbox:images' + SUFFIX;
const BUILD = 'jailbox-sandbox-build:images' + SUFFIX;
const ABSENT = 'jailbox-sandbox-build:absent' + SUFFIX; // allowed, never built
const SHIM = join(dirname(JAILBOXD), 'jailbox-shim');

let srv;
let minimal; // docker's view of the two images
let build;

async function inspect(name) {
  const r = await docker('GET', `/images/${encodeURIComponent(name)}/json`);
  assert.equal(r.status, 200, `image ${name}`);
  return r.json;
}

async function waitFor(what, fn, timeoutMs = 90000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}\n${srv.log().slice(-6000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function session(jobId) {
  const r = await srv.req('GET', '/v1/jailbox/' + jobId, { token: srv.serviceToken });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

const settled = (jobId) => waitFor(`${jobId} launched or failed`, async () => {
  const s = await session(jobId);
  return ['awaiting_agent', 'failed'].includes(s.state) ? s : null;
});

const count = async (table) => Number((await srv.db.query(`SELECT count(*) FROM ${table}`)).rows[0].count);

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'), ['--shim', SHIM, '--tag', MINIMAL], { stdio: 'inherit' });
  // the cached path: debootstrap runs only when var/sandbox-image/ has no root for this recipe
  const t0 = Date.now();
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'), ['--userland', '--shim', SHIM, '--tag', BUILD],
    { stdio: 'inherit' });
  console.log(`# build.sh --userland took ${Date.now() - t0} ms`);
  await docker('DELETE', `/images/${encodeURIComponent(ABSENT)}?force=1`);
  minimal = await inspect(MINIMAL);
  build = await inspect(BUILD);
  const ctl = join(tmpdir(), 'jbctl-' + Math.random().toString(36).slice(2) + '.sock');
  // the allowlist as a flag, over the environment's: the worker jailboxd starts gets it too
  srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_WORKER_CONTROL: ctl, JAILBOX_SANDBOX_IMAGE: MINIMAL,
                            JAILBOX_SANDBOX_IMAGES: 'jailbox-sandbox-build:latest' },
                          { args: [`--sandbox-images=${BUILD}, ${ABSENT}`] });
  srv.ctl = ctl;
  await waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()));
});

after(async () => {
  const jobs = (await srv.db.query('SELECT job_id FROM sessions')).rows.map((r) => r.job_id);
  for (const j of jobs) {
    const s = await session(j);
    if (!['failed', 'aborted', 'accepted'].includes(s.state))
      await srv.req('POST', `/v1/jailbox/${j}/abort`, { token: srv.serviceToken, body: { reason: 'test cleanup' } });
  }
  const r = await srv.stop();
  assert.equal(r.code, 0, 'jailboxd exits 0 on SIGTERM');
  const list = await docker('GET', '/containers/json?all=1&filters=' +
    encodeURIComponent(JSON.stringify({ label: ['jailbox.session'] })));
  const left = list.json.filter((c) => jobs.includes(c.Labels['jailbox.session']));
  for (const c of left) await docker('DELETE', `/containers/${c.Id}?force=1`);
  assert.deepEqual(left.map((c) => c.Id), [], 'containers left behind');
});

test('the two images carry the labels the contract reads, and differ', () => {
  for (const img of [minimal, build]) {
    assert.match(img.Config.Labels['jailbox.image.digest'], /^[0-9a-f]{64}$/);
    assert.match(img.Config.Labels['jailbox.shim.sha256'], /^[0-9a-f]{64}$/);
    assert.match(img.Config.Labels['jailbox.bwrap.version'], /^bubblewrap \d/);
  }
  // the same static shim in both
  assert.equal(build.Config.Labels['jailbox.shim.sha256'], minimal.Config.Labels['jailbox.shim.sha256']);
  assert.notEqual(build.Config.Labels['jailbox.image.digest'], minimal.Config.Labels['jailbox.image.digest']);
  assert.match(build.Config.Labels['jailbox.userland'], /^debian bookworm .*build-essential git python3 make pkg-config .*autoconf automake libtool$/);
  assert.ok(build.Size > 100 * 1024 * 1024 && build.Size < 700 * 1024 * 1024, `userland image size ${build.Size}`);
  assert.ok(minimal.Size < 10 * 1024 * 1024, `minimal image size ${minimal.Size}`);
});

test('a session opened with the build image runs in it; the contract names it with id and digest', async () => {
  const o = await srv.open({ workspace: 'img-build-' + Math.random().toString(36).slice(2), image: BUILD });
  assert.equal(o.image, BUILD);
  const s = await settled(o.jobId);
  assert.equal(s.state, 'awaiting_agent', `${s.stateReason}\n${srv.log().slice(-4000)}`);
  assert.equal(s.image, BUILD);
  assert.deepEqual(s.walls.image, { name: BUILD, id: build.Id, contentDigest: build.Config.Labels['jailbox.image.digest'] });
  assert.equal(s.walls.status, 'up');
  for (const w of ['gvisor', 'docker', 'bwrap']) assert.equal(s.walls.walls[w].up, true, w);
  assert.equal(s.walls.walls.docker.image, BUILD);
  assert.equal(s.walls.walls.docker.imageId, build.Id);
  assert.equal(s.walls.walls.bwrap.bwrap, build.Config.Labels['jailbox.bwrap.version']);
  // its shell and toolchain, as the spawner found them: exec is offered
  assert.equal(s.walls.exec.available, true, JSON.stringify(s.walls.exec).slice(0, 400));
  assert.equal(s.walls.exec.image.shell, true);
  for (const p of ['sh', 'bash', 'make', 'cc', 'gcc', 'git', 'python3']) assert.ok(s.walls.exec.image.programs.includes(p), p);
  // the container Docker runs is made from that image
  const c = await docker('GET', `/containers/${s.walls.walls.docker.containerId}/json`);
  assert.equal(c.json.Image, build.Id);
  assert.equal(c.json.Config.Image, BUILD);
  // and the jailed shim in it answers, still uid 65534 with no capability
  const st = await control(srv.ctl, { jobId: o.jobId, request: { op: 'status' } });
  assert.equal(st.ok, true, JSON.stringify(st));
  assert.equal(st.answer.result.uid.effective, 65534);
  assert.match(st.answer.result.capabilities.effective, /^0+$/);
});

test('a session that names no image gets JAILBOX_SANDBOX_IMAGE', async () => {
  const o = await srv.open({ workspace: 'img-default-' + Math.random().toString(36).slice(2) });
  assert.equal(o.image, MINIMAL);
  const s = await settled(o.jobId);
  assert.equal(s.state, 'awaiting_agent', s.stateReason);
  assert.deepEqual(s.walls.image, { name: MINIMAL, id: minimal.Id, contentDigest: minimal.Config.Labels['jailbox.image.digest'] });
  // no shell in the minimal image: no exec (tools/list leaves it out, tools_offer.test.mjs)
  assert.deepEqual([s.walls.exec.available, s.walls.exec.reason, s.walls.exec.image.shell, s.walls.exec.image.programs],
    [false, 'the image has no /bin/sh: no command can run', false, []]);
  const c = await docker('GET', `/containers/${s.walls.walls.docker.containerId}/json`);
  assert.equal(c.json.Image, minimal.Id);
});

test('an image outside the allowlist is refused with 400: no session, no job, no container', async () => {
  const before = { sessions: await count('sessions'), jobs: await count('launch_jobs') };
  // the project's default build image is not in this server's list, nor is another tag
  for (const image of ['jailbox-sandbox-build:latest', 'jailbox-sandbox-build', 'debian:bookworm', BUILD + 'x']) {
    const r = await srv.req('POST', '/v1/jailbox', { token: srv.serviceToken,
      body: { agentId: 'agent-1', workspace: 'img-refused', image } });
    assert.equal(r.status, 400, image);
    assert.equal(r.json.error.code, 'bad_request');
    assert.match(r.json.error.message, /JAILBOX_SANDBOX_IMAGES/);
  }
  await new Promise((r) => setTimeout(r, 500)); // a launch, had one been queued, would have begun
  assert.equal(await count('sessions'), before.sessions);
  assert.equal(await count('launch_jobs'), before.jobs);
  assert.doesNotMatch(srv.log(), /img-refused/);
});

test('an allowed image the daemon does not have fails the launch, naming the image', async () => {
  const o = await srv.open({ workspace: 'img-absent-' + Math.random().toString(36).slice(2), image: ABSENT });
  assert.equal(o.image, ABSENT);
  const s = await settled(o.jobId);
  assert.equal(s.state, 'failed');
  assert.match(s.stateReason, new RegExp(`^wall docker: image ${ABSENT.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} not present`));
  assert.match(s.stateReason, /build\.sh --userland/);
});
