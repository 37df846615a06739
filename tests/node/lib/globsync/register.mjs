// register.mjs — `node --import ./lib/globsync/register.mjs`: lets the MCP conformance suite
// (@modelcontextprotocol/conformance, built for Node ≥ 22) run on Node 20, whose `fs` has no
// globSync. Only that package's imports of `fs` are redirected, to fs.mjs beside this file:
// node:fs itself plus a globSync for the one pattern shape the suite uses.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
