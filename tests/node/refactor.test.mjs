// refactor.test.mjs — a coding agent's refactor of a real C library, end to end: over each
// of the agent's three MCP transports (Streamable HTTP, the stdio bridge, Socket.IO) the
// official SDK client works on a fresh copy of Debian's libyaml source (deploy/demo-source.sh,
// cached in var/demo-src) in a supervised session — search for a function's uses, rename it
// by editing three files (exact text, several edits in one call, replaceAll), mkdir, move a
// file into the new directory, delete one file (rejected by the buyer) and another
// (approved), find the C files and read a changed file by lines — while a scripted buyer
// (a socket.io-client buyer socket, or REST polling for the stdio run) approves every op but
// the one delete. Then the workspace on the host, GET …/changes and the audit chain exported
// with `jailboxctl audit export` and verified offline must agree. Needs root and Docker with
// runsc (as tools.test.mjs).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSandboxServer } from './lib/agent.mjs';
import { CTL, TRANSPORTS, connectClient, verifiedChain } from './lib/mcp.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const CACHE = process.env.JB_DEMO_CACHE || join(ROOT, 'var/demo-src');
const sha = (b) => createHash('sha256').update(b).digest('hex');

// the refactor: a scanner function used by the parser, renamed
const OLD = 'yaml_parser_fetch_more_tokens';
const NEW = 'yaml_parser_fetch_tokens';
const OLD_COMMENT = ' * Scanner: Ensure that the token stack contains at least one token ready.';
const NEW_COMMENT = ' * Scanner: Fetch tokens until the token queue holds at least one ready token.';
const PEEK_OLD = `(parser->token_available || ${OLD}(parser))`;
const PEEK_NEW = `(parser->token_available || ${NEW}(parser))`;
const MOVED_FROM = 'tests/example-reformatter.c';
const MOVED_TO = 'tests/examples/example-reformatter.c';
const REJECTED_DELETE = 'tests/example-deconstructor-alt.c';
const APPROVED_DELETE = 'announcement.msg';
const MUTATING = new Set(['write', 'edit', 'mkdir', 'move', 'delete']);

let kit, srv, SRC;

before(async () => {
  SRC = execFileSync(join(ROOT, 'deploy/demo-source.sh'), ['libyaml', CACHE], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  kit = await startSandboxServer('jailbox-sandbox:refactor', { JAILBOX_APPROVAL_TIMEOUT: '60' });
  srv = kit.srv;
});

after(async () => {
  kit?.closeSockets();
  await srv?.stop();
});

// every regular file under `dir`, workspace-relative, '/'-separated, sorted by bytes
function walk(dir, rel = '') {
  const out = [];
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? rel + '/' + e.name : e.name;
    if (e.isDirectory()) out.push(...walk(dir, p));
    else if (e.isFile()) out.push(p);
  }
  return out.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

// `path:line` of every line of a text file under `dir` that `re` matches (grep on the host)
function grep(dir, re) {
  const hits = [];
  for (const p of walk(dir)) {
    const b = readFileSync(join(dir, p));
    if (b.includes(0)) continue;
    b.toString('utf8').split('\n').forEach((l, i) => { if (re.test(l)) hits.push(`${p}:${i + 1}`); });
  }
  return hits.sort();
}

// The scripted buyer: decides every approval request of session `S` as it comes — rejects
// the delete of REJECTED_DELETE, approves the rest — over its Socket.IO buyer socket, or
// (`rest`) by polling GET …/ops?state=pending and POSTing approve/reject. `seen` has the
// requests in the order decided.
async function scriptedBuyer(S, { rest }) {
  const seen = [];
  const reject = (r) => r.tool === 'delete' && r.path === REJECTED_DELETE;
  if (!rest) {
    const b = await kit.connect(S.buyerToken);
    b.on('jailbox:approval_request', async (req) => {
      seen.push(req);
      const no = reject(req);
      const ack = await b.timeout(10000).emitWithAck(no ? 'jailbox:reject' : 'jailbox:approve',
        { opId: req.opId, reason: no ? 'keep the alternative example' : undefined });
      if (!ack.ok) seen.push({ ackError: ack });
    });
    return { seen, stop: () => b.close() };
  }
  let stopped = false;
  const decided = new Set();
  const loop = (async () => {
    while (!stopped) {
      const p = await srv.req('GET', `/v1/jailbox/${S.jobId}/ops?state=pending`, { token: S.buyerToken });
      for (const op of p.json?.ops ?? []) {
        if (decided.has(op.opId)) continue;
        decided.add(op.opId);
        seen.push(op);
        const no = reject(op);
        const r = await srv.req('POST', `/v1/jailbox/${S.jobId}/${no ? 'reject' : 'approve'}/${op.opId}`,
          { token: S.buyerToken, body: no ? { reason: 'keep the alternative example' } : undefined });
        if (r.status !== 200) seen.push({ ackError: r.text });
      }
      await new Promise((res) => setTimeout(res, 50));
    }
  })();
  return { seen, stop: async () => { stopped = true; await loop; } };
}

for (const kind of TRANSPORTS) {
  test(`a supervised refactor of libyaml by the SDK client over ${kind}: disk, changes and the verified audit chain agree`, { timeout: 150000 }, async () => {
    const S = await kit.openSession((d) => cpSync(SRC, d, { recursive: true }), { mode: 'supervised' });
    const orig = (p) => readFileSync(join(SRC, p));
    const disk = (p) => readFileSync(join(S.dir, p));
    const buyer = await scriptedBuyer(S, { rest: kind === 'stdio' });
    const client = await connectClient(kind, kit, S, 'jailbox-refactor-test');
    const call = (name, args) => client.callTool({ name, arguments: args });
    const ok = async (name, args) => {
      const r = await call(name, args);
      assert.equal(r.isError, false, `${name} ${JSON.stringify(args).slice(0, 200)}: ${JSON.stringify(r).slice(0, 600)}`);
      return r.structuredContent;
    };
    try {
      // where is it used? (the shim's PCRE2 search against a grep of the same tree on the host)
      const s1 = await ok('search', { pattern: `\\b${OLD}\\b`, maxMatches: 100 });
      const hits = s1.matches.map((m) => `${m.path}:${m.line}`).sort();
      assert.deepEqual(hits, grep(S.dir, new RegExp(`\\b${OLD}\\b`)));
      const inSrc = {};
      for (const m of s1.matches.filter((x) => x.path.startsWith('src/'))) inSrc[m.path] = (inSrc[m.path] ?? 0) + 1;
      assert.deepEqual(inSrc, { 'src/parser.c': 1, 'src/scanner.c': 3, 'src/yaml_private.h': 1 });
      for (const m of s1.matches) assert.equal(m.text, disk(m.path).toString().split('\n')[m.line - 1], `${m.path}:${m.line}`);
      assert.equal(s1.truncated ?? false, false);

      // the rename: replaceAll in the scanner, one exact edit in the parser, two in the header
      const e1 = await ok('edit', { path: 'src/scanner.c', edits: [{ oldText: OLD, newText: NEW, replaceAll: true }] });
      assert.equal(e1.replaced, 3);
      const e2 = await ok('edit', { path: 'src/parser.c', edits: [{ oldText: PEEK_OLD, newText: PEEK_NEW }] });
      assert.equal(e2.replaced, 1);
      const e3 = await ok('edit', { path: 'src/yaml_private.h', edits: [
        { oldText: OLD_COMMENT, newText: NEW_COMMENT },
        { oldText: `${OLD}(yaml_parser_t *parser);`, newText: `${NEW}(yaml_parser_t *parser);` }] });
      assert.equal(e3.replaced, 2);
      // an edit that does not apply changes nothing and never reaches the buyer
      const bad = await call('edit', { path: 'src/parser.c', edits: [{ oldText: PEEK_OLD, newText: PEEK_NEW }] });
      assert.deepEqual([bad.isError, bad.structuredContent.error.reason], [true, 'no_match'], JSON.stringify(bad));

      // a directory for the examples, one moved into it
      assert.equal((await ok('mkdir', { path: 'tests/examples' })).created, true);
      assert.equal((await ok('move', { source: MOVED_FROM, destination: MOVED_TO })).moved, true);
      // the buyer rejects this delete: the model reads why, the file stays
      const rj = await call('delete', { path: REJECTED_DELETE });
      assert.equal(rj.isError, true, JSON.stringify(rj));
      assert.deepEqual([rj.structuredContent.error.reason, rj.structuredContent.error.code], ['rejected', -32014]);
      assert.match(rj.content[0].text, /keep the alternative example/);
      assert.equal((await ok('delete', { path: APPROVED_DELETE })).deleted, 1);

      // the results, as the agent sees them
      const f = await ok('find', { pattern: '**/*.c' });
      const cFiles = walk(S.dir).filter((p) => p.endsWith('.c'));
      assert.deepEqual([...f.matches].sort(), [...cFiles].sort());
      assert.equal(cFiles.length, walk(SRC).filter((p) => p.endsWith('.c')).length);
      assert.ok(f.matches.includes(MOVED_TO) && !f.matches.includes(MOVED_FROM) && f.matches.includes(REJECTED_DELETE));
      const at = disk('src/scanner.c').toString().split('\n').findIndex((l) => l === `${NEW}(yaml_parser_t *parser)`); // the definition
      assert.ok(at > 0);
      const rd = await ok('read', { path: 'src/scanner.c', offset: at - 1, limit: 3 });
      assert.deepEqual([rd.lines.first, rd.lines.count], [at - 1, 3]);
      assert.equal(rd.content, disk('src/scanner.c').toString().split('\n').slice(at - 1, at + 2).join('\n') + '\n');
      assert.match(rd.content, new RegExp(`^${NEW}\\(yaml_parser_t \\*parser\\)$`, 'm'));
      const s2 = await ok('search', { pattern: `\\b${OLD}\\b`, path: 'src' });
      assert.deepEqual(s2.matches, []);
      const s3 = await ok('search', { pattern: `\\b${NEW}\\b`, path: 'src', glob: '**/*.[ch]' });
      assert.deepEqual(s3.matches.map((m) => m.path).sort(), ['src/parser.c', 'src/scanner.c', 'src/scanner.c', 'src/scanner.c', 'src/yaml_private.h']);
    } finally {
      await client.close();
      await buyer.stop();
    }

    // ---- the disk, on the host ----
    const want = {
      'src/scanner.c': orig('src/scanner.c').toString().replaceAll(OLD, NEW),
      'src/parser.c': orig('src/parser.c').toString().replace(PEEK_OLD, PEEK_NEW),
      'src/yaml_private.h': orig('src/yaml_private.h').toString().replace(OLD_COMMENT, NEW_COMMENT).replace(OLD, NEW),
    };
    for (const [p, text] of Object.entries(want)) {
      assert.notEqual(text, orig(p).toString(), p);
      assert.equal(disk(p).toString(), text, p);
    }
    assert.deepEqual(readdirSync(join(S.dir, 'tests/examples')), ['example-reformatter.c']);
    assert.ok(disk(MOVED_TO).equals(orig(MOVED_FROM)));
    assert.ok(!existsSync(join(S.dir, MOVED_FROM)));
    assert.ok(disk(REJECTED_DELETE).equals(orig(REJECTED_DELETE)), 'the rejected delete left the file');
    assert.ok(!existsSync(join(S.dir, APPROVED_DELETE)));
    // nothing else changed
    const untouched = walk(SRC).filter((p) => !(p in want) && ![MOVED_FROM, APPROVED_DELETE].includes(p));
    assert.deepEqual(walk(S.dir).filter((p) => !(p in want) && p !== MOVED_TO), untouched);
    for (const p of untouched) assert.ok(disk(p).equals(orig(p)), p);

    // ---- what the buyer was asked: every mutating op once, the edits with their exact diffs ----
    assert.deepEqual(buyer.seen.filter((x) => x.ackError), []);
    assert.deepEqual(buyer.seen.map((r) => `${r.tool} ${r.path}`), ['edit src/scanner.c', 'edit src/parser.c',
      'edit src/yaml_private.h', 'mkdir tests/examples', `move ${MOVED_FROM}`, `delete ${REJECTED_DELETE}`, `delete ${APPROVED_DELETE}`]);
    const asked = buyer.seen[0];
    const minus = asked.diff.text.split('\n').filter((l) => l.startsWith('-') && !l.startsWith('---'));
    const plus = asked.diff.text.split('\n').filter((l) => l.startsWith('+') && !l.startsWith('+++'));
    assert.equal(minus.length, 3, asked.diff.text);
    assert.deepEqual(plus, minus.map((l) => '+' + l.slice(1).replaceAll(OLD, NEW)));
    if (kind !== 'stdio') { // the event's fields (the REST op keeps its arguments)
      assert.equal(asked.currentSha256, sha(orig('src/scanner.c')));
      assert.equal(asked.sha256, sha(disk('src/scanner.c')));
    }

    // ---- GET …/changes: every approved change in op order, hashes of the disk ----
    const c = await srv.req('GET', `/v1/jailbox/${S.jobId}/changes`, { token: srv.serviceToken });
    assert.equal(c.status, 200, c.text);
    const ch = c.json.changes;
    assert.deepEqual(ch.map((x) => `${x.tool} ${x.path}`), ['edit src/scanner.c', 'edit src/parser.c',
      'edit src/yaml_private.h', 'mkdir tests/examples', `move ${MOVED_FROM}`, `delete ${APPROVED_DELETE}`]);
    assert.deepEqual(ch.map((x) => x.opId), [...ch.map((x) => x.opId)].sort((a, b) => a - b));
    for (const x of ch.slice(0, 3)) {
      assert.equal(x.sha256Before, sha(orig(x.path)), x.path);
      assert.equal(x.sha256After, sha(disk(x.path)), x.path);
      assert.equal(x.size, disk(x.path).length, x.path);
    }
    assert.equal(ch[3].type, 'dir');
    assert.deepEqual([ch[4].from, ch[4].to, ch[4].type, ch[4].sha256], [MOVED_FROM, MOVED_TO, 'file', sha(disk(MOVED_TO))]);
    assert.deepEqual([ch[5].type, ch[5].deleted], ['file', 1]);

    // ---- the audit chain: exported with jailboxctl, verified offline with the published keys ----
    const rows = verifiedChain(srv, S.jobId);
    const mut = rows.filter((r) => MUTATING.has(r.operation));
    const done = mut.filter((r) => r.details.ok === true);
    assert.deepEqual(done.map((r) => `${r.operation} ${r.path}`), ch.map((x) => `${x.tool} ${x.path}`));
    assert.ok(done.every((r) => r.details.decision === 'approved'), JSON.stringify(done.map((r) => r.details)));
    for (const r of done.filter((x) => x.operation === 'edit')) assert.equal(r.details.sha256, sha(disk(r.path)), r.path);
    assert.equal(done[4].details.destination, MOVED_TO);
    assert.equal(done[5].details.deleted, 1);
    const refused = mut.filter((r) => r.details.ok !== true);
    assert.deepEqual(refused.map((r) => [r.operation, r.path, r.details.decision ?? r.details.error]),
      [['edit', 'src/parser.c', 'no_match'], ['delete', REJECTED_DELETE, 'rejected']]);
    assert.ok(!rows.some((r) => JSON.stringify(r).includes(NEW_COMMENT.slice(3))), 'no file content in the chain');
  });
}
