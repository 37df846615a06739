// bench.mjs — bench/edit/run.sh: one changed line of a 100 KiB source file, sent as an MCP
// `edit` (the line's old and new text) against the same change sent as a `write` of the whole
// file, through the whole stack (npm socket.io-client agent → jailboxd → jailbox-worker →
// jailbox-shim inside gVisor + Docker + bwrap) in one unsupervised session. The two calls
// alternate (edit first on even rounds, write first on odd) so that drift of the machine falls
// on both; prints each one's p50/p99, the bytes each puts on the wire and the ratio of the
// medians (write / edit). Usage: node bench.mjs [ROUNDS] (run.sh passes it).
import { writeFileSync } from 'node:fs';
import { startSandboxServer } from '../../tests/node/lib/agent.mjs';

const rounds = Number(process.argv[2] ?? 200);
const LINES = 1700; // ~60 bytes a line: ~100 KiB
const line = (i, v) => `static int f${String(i).padStart(5, '0')}(int x) { return x * ${v} + ${i}; } /* pad */\n`;
const lines = Array.from({ length: LINES }, (_, i) => line(i, 0));
const K = await startSandboxServer('jailbox-sandbox:bench-edit', { JAILBOX_ESCAPE_ABORT: 'none' });
try {
  const S = await K.openSession((d) => writeFileSync(d + '/big.c', lines.join('')), { mode: 'unsupervised' });
  const agent = await K.connect(S.agentToken);
  const ok = async (name, args) => {
    const t = performance.now();
    const r = await K.call(agent, name, args);
    const dt = performance.now() - t;
    if (!r.result || r.result.isError) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
    return dt;
  };
  let v = 0;
  const bytes = { edit: 0, write: 0 };
  const edit = async () => {
    const i = (v * 97) % LINES;
    const args = { path: 'big.c', edits: [{ oldText: lines[i], newText: line(i, ++v) }] };
    bytes.edit = JSON.stringify(args).length;
    const dt = await ok('edit', args);
    lines[i] = line(i, v);
    return dt;
  };
  const write = async () => {
    const i = (v * 97) % LINES;
    lines[i] = line(i, ++v);
    const args = { path: 'big.c', content: lines.join('') };
    bytes.write = JSON.stringify(args).length;
    return ok('write', args);
  };
  for (let i = 0; i < 10; i++) { await edit(); await write(); } // warm: the session's copies, JIT
  const te = [], tw = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) { te.push(await edit()); tw.push(await write()); } else { tw.push(await write()); te.push(await edit()); }
  }
  // the file the shim holds is the one this side built: nothing was lost or applied twice
  const back = await K.call(agent, 'read', { path: 'big.c' });
  if (back.result?.structuredContent?.content !== lines.join('')) throw new Error('big.c differs from the expected text');
  const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
  console.log(`file: ${lines.join('').length} bytes, ${LINES} lines; ${rounds} alternating rounds`);
  console.log(`edit  (one line): p50 ${q(te, 0.5).toFixed(2)} ms  p99 ${q(te, 0.99).toFixed(2)} ms  ${bytes.edit} bytes of arguments`);
  console.log(`write (whole file): p50 ${q(tw, 0.5).toFixed(2)} ms  p99 ${q(tw, 0.99).toFixed(2)} ms  ${bytes.write} bytes of arguments`);
  console.log(`ratio write/edit p50 ${(q(tw, 0.5) / q(te, 0.5)).toFixed(2)}x, arguments ${(bytes.write / bytes.edit).toFixed(0)}x`);
  agent.close();
} finally {
  K.closeSockets();
  await K.srv.stop();
}

