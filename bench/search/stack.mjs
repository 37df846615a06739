// stack.mjs — bench/search/run.sh --stack: the shim's `search` op through the whole sandbox
// (a real jailboxd and worker, gVisor + bwrap + Wall 3, the tree copied into a session's
// workspace), sent over the worker's control socket, alternated with `grep -rnE` of the same
// tree on the host. Usage: node stack.mjs TREE RUNS PATTERN (run.sh passes them).
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { startJail, openSession, control } from '../../tests/node/lib/jail.mjs';

const [tree, runsArg, pattern] = process.argv.slice(2);
const runs = Number(runsArg);
const srv = await startJail({ image: 'jailbox-sandbox:bench-search', shim: 'jailbox-shim' });
try {
  const s = await openSession(srv, (dir) => execFileSync('cp', ['-a', tree + '/.', dir]));
  const search = async () => {
    const t = performance.now();
    const r = await control(srv.ctl, { jobId: s.jobId, request: { op: 'search', pattern, maxMatches: 5000 }, timeoutMs: 60000 }, 70000);
    const dt = performance.now() - t;
    if (!r.ok || !r.answer.ok) throw new Error(JSON.stringify(r));
    return [dt, r.answer.result];
  };
  const grep = () => {
    const t = performance.now();
    const p = spawnSync('grep', ['-rnE', pattern, join(s.dir)], { maxBuffer: 1 << 28 });
    return [performance.now() - t, p.stdout.toString().split('\n').length - 1];
  };
  await search(); grep();
  const ts = [], tg = [];
  let res, n;
  for (let i = 0; i < runs; i++) {
    let a, b;
    if (i % 2 === 0) { [a, res] = await search(); [b, n] = grep(); } else { [b, n] = grep(); [a, res] = await search(); }
    ts.push(a); tg.push(b);
  }
  const med = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
  console.log(`stack shim search: ${res.matches.length} matches, ${res.filesScanned} files scanned, jit ${res.jit}; grep: ${n} lines`);
  console.log(`stack: shim search through the walls p50 ${med(ts).toFixed(1)} ms (min ${Math.min(...ts).toFixed(1)}), ` +
    `grep -rnE p50 ${med(tg).toFixed(1)} ms (min ${Math.min(...tg).toFixed(1)}), ratio ${(med(ts) / med(tg)).toFixed(2)}x over ${runs} alternating runs`);
} finally {
  await srv.stop();
}
