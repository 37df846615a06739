// openapi.test.mjs — api/openapi.yaml and the routes jailboxd serves are the same set (every
// route documented, every documented path + method served), and the spec passes the Redocly
// `recommended` lint (tests/node/redocly.yaml) with no error and no warning.
// Needs JAILBOXD (path of the binary) or the default build; starts no server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const here = dirname(fileURLToPath(import.meta.url));
const JAILBOXD = process.env.JAILBOXD || join(here, '../../build/jailboxd');
const SPEC = join(here, '../../api/openapi.yaml');
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

// "METHOD /path/:name" lines from the binary's own route table
function servedRoutes() {
  const out = execFileSync(JAILBOXD, ['--routes'], { encoding: 'utf8', timeout: 10000 });
  const lines = out.split('\n').filter((l) => l.trim() !== '');
  for (const l of lines) assert.match(l, /^[A-Z]+ \/\S*$/, `--routes line "${l}"`);
  return lines;
}

// the same form from the spec: {name} path templates become :name segments
function documentedRoutes() {
  const spec = YAML.parse(readFileSync(SPEC, 'utf8'));
  const routes = [];
  for (const [path, item] of Object.entries(spec.paths || {}))
    for (const m of METHODS)
      if (item[m]) routes.push(`${m.toUpperCase()} ${path.replace(/\{([^}/]+)\}/g, ':$1')}`);
  return routes;
}

test('jailboxd --routes prints its route table', () => {
  const routes = servedRoutes();
  assert.ok(routes.length > 0, 'no routes printed');
  assert.equal(new Set(routes).size, routes.length, 'a route is listed twice');
});

test('every served route is documented in api/openapi.yaml', () => {
  const documented = new Set(documentedRoutes());
  const missing = servedRoutes().filter((r) => !documented.has(r));
  assert.deepEqual(missing, [], 'served but not in api/openapi.yaml');
});

test('every documented path and method is served', () => {
  const served = new Set(servedRoutes());
  const extra = documentedRoutes().filter((r) => !served.has(r));
  assert.deepEqual(extra, [], 'in api/openapi.yaml but not served');
});

test('api/openapi.yaml passes the Redocly recommended lint', () => {
  // `--no`: never download a missing package; telemetry and the update check are off, so
  // nothing leaves the machine.
  const r = spawnSync('npx', ['--no', 'redocly', 'lint', '--config', 'redocly.yaml',
                              '--format', 'json', SPEC], {
    cwd: here,
    encoding: 'utf8',
    timeout: 120000,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', NODE_ENV: 'test',
           npm_config_update_notifier: 'false', npm_config_offline: 'true' },
  });
  const report = `exit ${r.status}\n${r.stdout}\n${r.stderr}`;
  assert.equal(r.status, 0, 'redocly lint failed:\n' + report);
  const totals = JSON.parse(r.stdout.slice(r.stdout.indexOf('{'))).totals;
  assert.equal(totals.errors, 0, report);
  assert.equal(totals.warnings, 0, report);
});
