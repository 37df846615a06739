// bench.mjs — bench/policy/run.sh: what deciding an op against a session's approval rules
// costs, through the whole stack (npm socket.io-client agent → jailboxd → jailbox-worker →
// jailbox-shim inside gVisor + Docker + bwrap). Two pairs of sessions on one jailboxd:
//   none:  unsupervised, no rules            vs  256:  unsupervised, 256 rules none of which
//                                                      matches the op (every one is tried)
//   one:   supervised, one rule allowing it  vs  last: supervised, 255 rules that do not match
//                                                      and the same allow rule last
// The op is the same MCP `write` of 1 KiB to notes/n.txt in all four. The calls alternate
// (baseline first on even rounds, the session with rules first on odd ones) so that drift of
// the machine falls on both; prints each one's p50/p90 and the ratio of the medians (target:
// 256 rules add at most 5 %). Usage: node bench.mjs [ROUNDS] (run.sh passes it).
import { writeFileSync, mkdirSync, readFileSync } from 'node:fs';
import { startSandboxServer } from '../../tests/node/lib/agent.mjs';

const rounds = Number(process.argv[2] ?? 300);

// 255 rules of the kinds a buyer's session gathers, none matching a write of notes/n.txt:
// allow-similar directory and extension globs, denies of secret directories, asks on
// generated files (a glob without '/' is tried on every component of the path), edits,
// and execs by argv prefix
function rules(n) {
  const out = [];
  for (let i = 0; out.length < n; i++) {
    const k = i % 6;
    if (k === 0) out.push({ tool: 'write', path: `src/mod${i}/**`, effect: 'allow' });
    else if (k === 1) out.push({ tool: 'write', path: `lib/pkg${i}/**/*.c`, effect: 'allow' });
    else if (k === 2) out.push({ tool: 'write', path: `secrets${i}/**`, effect: 'deny' });
    else if (k === 3) out.push({ tool: 'write', path: `*.gen${i}`, effect: 'ask' });
    else if (k === 4) out.push({ tool: 'edit', path: `docs/part${i}/*.md`, effect: 'allow' });
    else out.push({ tool: 'exec', argvPrefix: ['make', `target${i}`], effect: 'allow' });
  }
  return out;
}
const ALLOW = { tool: 'write', path: 'notes/**', effect: 'allow' };

const K = await startSandboxServer('jailbox-sandbox:bench-policy', { JAILBOX_ESCAPE_ABORT: 'none' });
try {
  const build = (d) => mkdirSync(d + '/notes', { recursive: true });
  const open = async (mode, list) => {
    const S = await K.openSession(build, { mode, ...(list.length ? { policy: { rules: list } } : {}) });
    const r = await K.srv.req('GET', `/v1/jailbox/${S.jobId}/rules`, { token: S.buyerToken });
    if (r.json.rules.length !== list.length) throw new Error(`${mode}: ${r.json.rules.length} rules, not ${list.length}`);
    return { S, agent: await K.connect(S.agentToken) };
  };
  const pairs = [
    ['none', await open('unsupervised', []), '256', await open('unsupervised', rules(256))],
    ['one', await open('supervised', [ALLOW]), 'last', await open('supervised', [...rules(255), ALLOW])],
  ];
  let v = 0;
  const content = (n) => `note ${n} `.padEnd(1024, '.');
  const write = async (x) => {
    const n = ++v;
    const t = performance.now();
    const r = await K.call(x.agent, 'write', { path: 'notes/n.txt', content: content(n) });
    const dt = performance.now() - t;
    if (!r.result || r.result.isError) throw new Error(`write: ${JSON.stringify(r).slice(0, 300)}`);
    x.last = n;
    return dt;
  };
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  for (const [an, a, bn, b] of pairs) {
    for (let i = 0; i < 20; i++) { await write(a); await write(b); } // warm: copies, JIT
    const ta = [], tb = [];
    for (let r = 0; r < rounds; r++) {
      if (r % 2 === 0) { ta.push(await write(a)); tb.push(await write(b)); } else { tb.push(await write(b)); ta.push(await write(a)); }
    }
    // the last write is what the workspace holds, and the ops were decided as expected
    for (const x of [a, b]) {
      if (readFileSync(x.S.dir + '/notes/n.txt', 'utf8') !== content(x.last)) throw new Error('notes/n.txt differs');
    }
    // no rule decided an op of the 256-rule session; the mode decided none of the last-rule one
    const other = bn === '256' ? 'rule' : 'mode';
    const ops = await K.srv.req('GET', `/v1/jailbox/${b.S.jobId}/ops?decidedBy=${other}`, { token: b.S.buyerToken });
    if (ops.status !== 200 || ops.json.ops.length !== 0) throw new Error(`${bn}: ops decided by ${other}: ${ops.text.slice(0, 300)}`);
    console.log(`${an.padEnd(4)} p50 ${q(ta, 0.5).toFixed(3)} ms  p90 ${q(ta, 0.9).toFixed(3)} ms   ` +
      `${bn.padEnd(4)} p50 ${q(tb, 0.5).toFixed(3)} ms  p90 ${q(tb, 0.9).toFixed(3)} ms   ` +
      `ratio ${bn}/${an} p50 ${(q(tb, 0.5) / q(ta, 0.5)).toFixed(3)}x  (${rounds} alternating rounds; target <= 1.05x)`);
  }
  for (const [, a, , b] of pairs) { a.agent.close(); b.agent.close(); }
} finally {
  K.closeSockets();
  await K.srv.stop();
}
