// keys.test.mjs — the audit signing key across instances on one PostgreSQL: an instance with a
// key of its own refuses to start and retires nothing; `jailboxctl keys rotate` under writes
// on two instances loses no write and the chains verify offline across it; an instance left
// with the retired key says so (/readyz 503 key_retired, writes refused with key_retired).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, createPrivateKey, createPublicKey, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync, copyFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  JAILBOXD, WORKER, cleanup, scratch, sharedSecrets, sleep, startInstance, startPostgres, waitFor,
} from './lib/cluster.mjs';

const CTL = join(dirname(JAILBOXD), 'jailboxctl');

let dir, pg, secrets, wsroot;
const running = [];

// the key id of a hex seed: first 8 bytes of SHA-256 of the Ed25519 public key (api/audit.md)
function keyId(hexSeed) {
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(hexSeed.trim(), 'hex')]);
  const pub = createPublicKey(createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }));
  const raw = pub.export({ format: 'der', type: 'spki' }).subarray(-32);
  return createHash('sha256').update(raw).digest('hex').slice(0, 16);
}

function newKeyFile(path) {
  const seed = randomBytes(32).toString('hex');
  writeFileSync(path, seed + '\n', { mode: 0o600 });
  return keyId(seed);
}

// replaces `path` with the content of `from` the way an operator's deploy tool would (rename)
function replaceFile(from, path) {
  copyFileSync(from, path + '.new');
  renameSync(path + '.new', path);
}

function ctl(args) {
  return execFileSync(CTL, args, { encoding: 'utf8', env: { ...process.env, JAILBOX_DATABASE_URL: pg.url } });
}

async function start(name, keyFile, env = {}) {
  const inst = await startInstance(name, dir, { pg, secrets: { ...secrets, keyFile }, wsroot, env });
  running.push(inst);
  return inst;
}

async function open(inst, jobId) {
  mkdirSync(join(wsroot, jobId), { recursive: true });
  const r = await inst.req('POST', '/v1/jailbox', { body: { jobId, agentId: 'agent-k', workspace: jobId } });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

// one write: the session's mode changed (an audit entry each time the mode differs; a session
// opens supervised, so a session's first write here makes one)
function write(inst, s) {
  s.flip = !s.flip;
  return inst.req('PATCH', `/v1/jailbox/${s.jobId}`, { token: s.buyerToken, body: { mode: s.flip ? 'unsupervised' : 'supervised' } });
}

async function verifyOffline(inst, jobId) {
  const chain = await inst.req('GET', `/v1/jailbox/${jobId}/audit`);
  assert.equal(chain.status, 200);
  const keys = await inst.req('GET', '/v1/audit/keys', { token: null });
  const f = join(dir, `${jobId}.jsonl`), k = join(dir, `${jobId}.keys.json`);
  writeFileSync(f, chain.text);
  writeFileSync(k, keys.text);
  let out;
  try { out = execFileSync(CTL, ['audit', 'verify', f, '--keys', k], { encoding: 'utf8' }); }
  catch (e) { assert.fail(`offline verify of ${jobId}: ${e.stdout}${e.stderr}`); }
  const ids = [...new Set(chain.text.trim().split('\n').map((l) => JSON.parse(l).keyId))];
  return { out, ids, keys: keys.json.keys };
}

before(async () => {
  dir = scratch('jbkeys-');
  pg = await startPostgres(dir);
  secrets = sharedSecrets(dir);
  wsroot = join(dir, 'ws');
  mkdirSync(wsroot);
});

after(async () => {
  for (const i of running) await i.stop();
  pg?.stop();
  if (dir) cleanup(dir);
});

test('an instance with a key of its own refuses to start, naming both keys; the first keeps serving writes', { timeout: 120000 }, async () => {
  const aKey = join(dir, 'a.key');
  copyFileSync(secrets.keyFile, aKey);
  const activeId = keyId(readFileSync(aKey, 'utf8'));
  const A = await start('a', aKey);
  const s = await open(A, 'job-a1');
  assert.equal((await write(A, s)).status, 200);

  const otherKey = join(dir, 'other.key');
  const otherId = newKeyFile(otherKey);
  let log = '';
  await assert.rejects(start('stray', otherKey), (e) => { log = e.message; return true; });
  assert.match(log, /exited \{"code":1/);
  assert.ok(log.includes(otherId), 'names its own key id:\n' + log);
  assert.ok(log.includes(activeId), 'names the active key id:\n' + log);
  assert.match(log, /jailboxctl keys rotate --key/);
  assert.match(log, /active key file/);

  // a jailbox-worker with that key is refused the same way, before it touches docker
  const w = spawn(WORKER, [], { env: { ...process.env, JAILBOX_DATABASE_URL: pg.url, JAILBOX_WORKER_ID: 'stray-w',
    JAILBOX_SIGNING_KEY_FILE: otherKey }, stdio: ['ignore', 'ignore', 'pipe'] });
  let wlog = '';
  w.stderr.on('data', (d) => { wlog += d; });
  const wexit = await new Promise((res) => w.once('exit', (code) => res(code)));
  assert.notEqual(wexit, 0, wlog);
  assert.ok(wlog.includes(otherId) && wlog.includes(activeId), 'the worker names both keys:\n' + wlog);

  // nothing was retired: the first instance still writes, the keys are as they were
  for (let i = 0; i < 5; i++) assert.equal((await write(A, s)).status, 200);
  const keys = (await A.req('GET', '/v1/audit/keys', { token: null })).json.keys;
  assert.deepEqual(keys.map((k) => [k.keyId, k.retiredAt]), [[activeId, null]]);
  assert.equal((await A.req('GET', '/readyz', { token: null })).status, 200);
});

test('keys rotate across two running instances under writes: no write fails, the chains verify offline across it', { timeout: 180000 }, async (t) => {
  const aKey = join(dir, 'a.key'), bKey = join(dir, 'b.key');
  copyFileSync(aKey, bKey);
  const oldId = keyId(readFileSync(aKey, 'utf8'));
  const A = running.find((i) => i.name === 'a');
  const B = await start('b', bKey);
  const sa = await open(A, 'job-ra'), sb = await open(B, 'job-rb');

  let stop = false;
  const results = { ok: 0, failed: [] };
  const loop = async (inst, sess) => {
    while (!stop) {
      const r = await write(inst, sess);
      if (r.status === 200) results.ok++;
      else results.failed.push(`${inst.name} ${r.status} ${r.text}`);
    }
  };
  const loops = [loop(A, sa), loop(B, sb), loop(A, sb), loop(B, sa)];
  await sleep(500);
  const before = results.ok;

  // the operator's rotation: the new key file on every host, then keys rotate
  const newKey = join(dir, 'new.key');
  const newId = newKeyFile(newKey);
  replaceFile(newKey, aKey);
  replaceFile(newKey, bKey);
  await sleep(300); // both have seen a key that is not published yet: they keep the old one
  const out = ctl(['keys', 'rotate', '--key', newKey]);
  assert.match(out, new RegExp(`key ${newId} .* is active; retired ${oldId} as of `));
  // both take up the new key
  await waitFor('both instances sign with the new key', () =>
    A.log().includes(`"audit signing key switched"`) && B.log().includes(`"audit signing key switched"`), 20000,
  () => A.log() + B.log());
  const atSwitch = results.ok;
  await waitFor('writes after the switch', () => results.ok >= atSwitch + 20, 30000);
  stop = true;
  await Promise.all(loops);
  assert.deepEqual(results.failed, [], 'no write failed');
  assert.ok(atSwitch > before, `writes went on during the rotation (${before} before, ${atSwitch} at the switch)`);
  t.diagnostic(`writes: ${before} before the key files changed, ${atSwitch - before} until both switched, ${results.ok} in all, 0 failed`);

  for (const job of [sa.jobId, sb.jobId]) {
    const v = await verifyOffline(A, job);
    assert.match(v.out, /^intact: /);
    assert.deepEqual(v.ids, [oldId, newId], `${job}: the chain has entries of both keys, old then new`);
    const byId = Object.fromEntries(v.keys.map((k) => [k.keyId, k]));
    assert.equal(byId[newId].retiredAt, null);
    assert.match(byId[oldId].retiredAt, /^\d{4}-\d\d-\d\dT/);
  }
  for (const inst of [A, B]) assert.equal((await inst.req('GET', '/readyz', { token: null })).status, 200);
});

test('an instance left with the retired key: /readyz 503 key_retired, writes refused with key_retired', { timeout: 120000 }, async () => {
  const A = running.find((i) => i.name === 'a'), B = running.find((i) => i.name === 'b');
  const s = await open(A, 'job-left');
  const aKey = join(dir, 'a.key');
  const curId = keyId(readFileSync(aKey, 'utf8'));
  // a new key for A only, rotated to with a one-second grace; B's file keeps the old key
  const next = join(dir, 'next.key');
  const nextId = newKeyFile(next);
  replaceFile(next, aKey);
  const out = ctl(['keys', 'rotate', '--key', next, '--grace', '1']);
  assert.match(out, new RegExp(`retired ${curId} as of .*grace 1s`));
  await waitFor('A signs with the new key', () => A.log().includes(`"key_id":"${nextId}"`), 20000, () => A.log());
  await sleep(1500); // past the grace
  const ready = await B.req('GET', '/readyz', { token: null });
  assert.equal(ready.status, 503);
  assert.equal(ready.json.error.code, 'key_retired');
  assert.ok(ready.json.error.message.includes(curId) && ready.json.error.message.includes(nextId), ready.text);
  const w = await write(B, s);
  assert.equal(w.status, 503, w.text);
  assert.equal(w.json.error.code, 'key_retired');
  mkdirSync(join(wsroot, 'job-refused'));
  const o = await B.req('POST', '/v1/jailbox', { body: { jobId: 'job-refused', agentId: 'agent-k', workspace: 'job-refused' } });
  assert.equal(o.status, 503, o.text);
  assert.equal(o.json.error.code, 'key_retired');
  // A goes on; the refused write left nothing in the chain
  assert.equal((await write(A, s)).status, 200);
  assert.equal((await A.req('GET', '/readyz', { token: null })).status, 200);
  assert.match((await verifyOffline(A, s.jobId)).out, /^intact: /);
  // B given the active key takes it up without a restart
  replaceFile(next, join(dir, 'b.key'));
  await waitFor('B ready again', async () => (await B.req('GET', '/readyz', { token: null })).status === 200, 20000, () => B.log());
  assert.equal((await write(B, s)).status, 200);
});
