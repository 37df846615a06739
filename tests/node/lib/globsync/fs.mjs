// fs.mjs — node:fs with a globSync (Node ≥ 22) for patterns "**/NAME": the relative paths of
// the files named NAME under options.cwd. Any other pattern throws, so that a newer suite
// that needs more fails loudly instead of finding nothing.
import fs from 'node:fs';
import { join } from 'node:path';

export * from 'node:fs';
export default fs;

export function globSync(pattern, options = {}) {
  const m = /^\*\*\/([^*?[\]{}/\\]+)$/.exec(pattern);
  if (!m) throw new Error(`globSync (Node 20 stand-in): unsupported pattern ${pattern}`);
  const cwd = options.cwd ?? process.cwd();
  const found = [];
  const walk = (rel) => {
    for (const e of fs.readdirSync(join(cwd, rel), { withFileTypes: true })) {
      const p = rel ? join(rel, e.name) : e.name;
      if (e.isDirectory()) walk(p);
      else if (e.name === m[1]) found.push(p);
    }
  };
  walk('');
  return found;
}
