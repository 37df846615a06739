// reasons.test.mjs — every reason an agent can receive for a failed tool call (data.reason,
// or structuredContent.error.reason) is documented in api/events.md: the reasons are
// enumerated from the op path's source (api/core/*.c: each op_error call with a literal
// reason, the shim-error map of op_worker.c, and session_<state> for an op its session's end
// rejected), so that a reason added without its documentation fails here. No server needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './lib/jail.mjs';

const agentDir = join(ROOT, 'api/core');
const sources = readdirSync(agentDir).filter((f) => f.endsWith('.c')).map((f) => readFileSync(join(agentDir, f), 'utf8'));
const doc = readFileSync(join(ROOT, 'api/events.md'), 'utf8');

function reasons() {
  const out = new Set();
  for (const src of sources) {
    for (const m of src.matchAll(/op_error\(\s*[a-z>.-]+,\s*JB_MCP_[A-Z_]+,\s*"([a-z_]+)"/g)) out.add(m[1]);
    for (const m of src.matchAll(/\{"[a-z_]+", JB_MCP_[A-Z_]+, "([a-z_]+)"\}/g)) out.add(m[1]);
  }
  return out;
}

test('every reason of a failed tool call is documented in api/events.md', () => {
  const all = reasons();
  // the ones the worker-durability work added are among them (the enumeration works)
  for (const r of ['rejected', 'worker_restarted', 'unavailable', 'changed']) assert.ok(all.has(r), r);
  assert.ok(all.size >= 15, [...all].join(' '));
  const missing = [...all].filter((r) => !doc.includes('`' + r + '`'));
  assert.deepEqual(missing, [], 'reasons not in api/events.md: ' + missing.join(', '));
  // an op rejected by its session's end names the session's state, never the buyer
  assert.match(sources.join('\n'), /snprintf\(why, sizeof why, "session_%s", sess_state\)/);
  for (const st of ['failed', 'aborted']) assert.ok(doc.includes('`session_' + st + '`'), 'session_' + st);
});
