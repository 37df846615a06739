// shimops.test.mjs — the shim's tree and search ops (mkdir, move, delete, find, search, the
// line modes of read, read_many) run inside the real walls: gVisor, bwrap, Wall 3's filter,
// uid 65534 on a bind-mounted workspace, reached over the worker's control socket. It also
// records what the runtime's file system answers to renameat2's flags (sandbox/WALLS.md) and
// whether PCRE2's JIT works under Wall 3 (mmap with PROT_EXEC).
// Needs root, Docker with runsc registered (deploy/install-deps.sh, deploy/start-dockerd.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync, linkSync } from 'node:fs';
import { join } from 'node:path';
import { startJail, openSession, control } from './lib/jail.mjs';

let srv;
let s;
before(async () => {
  srv = await startJail({ image: 'jailbox-sandbox:test' });
  s = await openSession(srv, (dir) => {
    mkdirSync(join(dir, 'src/deep'), { recursive: true });
    writeFileSync(join(dir, 'src/a.c'), 'int main(void) {\n  return 0;\n}\n');
    writeFileSync(join(dir, 'src/deep/b.c'), 'x\n'.repeat(1000) + 'needle here\n');
    writeFileSync(join(dir, 'aaaa.txt'), 'a'.repeat(5000) + 'b\n');
    writeFileSync(join(dir, 'one'), '1\n');
    writeFileSync(join(dir, 'two'), '2\n');
    writeFileSync(join(dir, 'hl'), 'shared\n');
    linkSync(join(dir, 'hl'), join(dir, 'hl2'));
    mkdirSync(join(dir, 'tree/sub'), { recursive: true });
    writeFileSync(join(dir, 'tree/sub/f'), 'f\n');
    symlinkSync('/etc', join(dir, 'tree/out'));
  });
});
after(async () => { await srv?.stop(); });

async function op(request, timeoutMs = 30000) {
  const r = await control(srv.ctl, { jobId: s.jobId, request, timeoutMs }, timeoutMs + 5000);
  assert.ok(r.ok, JSON.stringify(r));
  return r.answer;
}
const ok = async (request) => {
  const a = await op(request);
  assert.equal(a.ok, true, JSON.stringify(a));
  return a.result;
};

test('renameat2 flags inside gVisor (recorded in sandbox/WALLS.md)', async () => {
  const found = {};
  for (const flags of ['none', 'noreplace', 'exchange', 'whiteout']) {
    const a = await op({ op: 'test.renameat2', from: 'one', to: 'two', flags });
    found[flags] = a.result;
    if (a.result?.ok && flags !== 'exchange') {
      // put the file back for the next probe (none and whiteout moved one onto two)
      writeFileSync(join(s.dir, 'one'), '1\n');
      writeFileSync(join(s.dir, 'two'), '2\n');
    }
  }
  console.log('renameat2 in gVisor:', JSON.stringify(found));
  // gVisor 2024-07 answers EINVAL to every flag on the bind-mounted workspace: move falls back
  // (sandbox/shim/treeops.c, rename_noreplace)
  assert.ok(found.none.ok);
  assert.ok(found.noreplace.ok === false);
});

test('move: RENAME_NOREPLACE refuses an existing destination, overwrite replaces', async () => {
  writeFileSync(join(s.dir, 'one'), '1\n');
  writeFileSync(join(s.dir, 'two'), '2\n');
  const a = await op({ op: 'move', path: 'one', destination: 'two' });
  assert.equal(a.ok, false);
  assert.equal(a.error.code, 'exists');
  assert.equal(readFileSync(join(s.dir, 'two'), 'utf8'), '2\n');
  const r = await ok({ op: 'move', path: 'one', destination: 'src/one' });
  assert.deepEqual([r.moved, r.type], [true, 'file']);
  assert.ok(existsSync(join(s.dir, 'src/one')) && !existsSync(join(s.dir, 'one')));
  const o = await ok({ op: 'move', path: 'src/one', destination: 'two', overwrite: true });
  assert.equal(o.replaced, true);
  assert.equal(readFileSync(join(s.dir, 'two'), 'utf8'), '1\n');
  const h = await op({ op: 'move', path: 'hl', destination: 'hl3' });
  assert.equal(h.error.escape, 'hard_link');
});

test('mkdir, find, delete (a refused recursive delete changes nothing)', async () => {
  const m = await ok({ op: 'mkdir', path: 'new/a/b' });
  assert.equal(m.created, true);
  assert.ok(existsSync(join(s.dir, 'new/a/b')));
  const f = await ok({ op: 'find', pattern: '*.c' });
  assert.deepEqual(f.matches, ['src/a.c', 'src/deep/b.c']);
  const d = await op({ op: 'delete', path: 'tree', recursive: true });
  assert.equal(d.error.escape, 'symlink_escape');
  assert.ok(existsSync(join(s.dir, 'tree/sub/f')));
  const d2 = await ok({ op: 'delete', path: 'new', recursive: true });
  assert.equal(d2.deleted, 3);
  assert.ok(!existsSync(join(s.dir, 'new')));
});

test('search: matches, PCRE2 JIT under Wall 3, a catastrophic pattern ends with regex_limit', async () => {
  const r = await ok({ op: 'search', pattern: 'needle|return' });
  assert.deepEqual(r.matches.map((m) => [m.path, m.line]), [['src/a.c', 2], ['src/deep/b.c', 1001]]);
  console.log('search in the jail: jit', r.jit);
  const t0 = Date.now();
  const c = await op({ op: 'search', pattern: '(a+)+$', path: 'aaaa.txt' });
  const ms = Date.now() - t0;
  console.log('(a+)+$ on 5,000 a: ', JSON.stringify(c.error ?? c.result), ms, 'ms');
  assert.equal(c.ok, false);
  assert.equal(c.error.code, 'regex_limit');
  assert.ok(ms < 10000, `took ${ms} ms`);
});

test('read by lines and read_many', async () => {
  const h = await ok({ op: 'read', path: 'src/deep/b.c', tail: 1 });
  assert.equal(h.content, 'needle here\n');
  assert.deepEqual(h.lines, { first: 1000, count: 1, total: 1001 });
  const m = await ok({ op: 'read_many', paths: ['src/a.c', 'tree/out/passwd'] });
  assert.equal(m.files[0].ok, true);
  assert.equal(m.files[1].error.escape, 'symlink_escape');
});
