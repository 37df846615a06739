// server.mjs — starts a real jailboxd (embedded PostgreSQL in a temp state directory) for a
// test file, and gives the test a service token, a pg client on the same database, and small
// HTTP helpers. Needs JAILBOXD (path of the binary) or the default build.
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const here = dirname(fileURLToPath(import.meta.url));
export const JAILBOXD = process.env.JAILBOXD || join(here, '../../../build/jailboxd');

// `opts.dir`: start again on the directory of an earlier server (its state and workspaces);
// `opts.args`: command-line flags for jailboxd; `opts.binary`: another jailboxd than JAILBOXD
export async function startServer(env = {}, opts = {}) {
  const dir = opts.dir || mkdtempSync(join(tmpdir(), 'jbnode-'));
  chmodSync(dir, 0o711);
  const state = join(dir, 'state');
  const wsroot = join(dir, 'workspaces');
  if (!opts.dir) mkdirSync(wsroot);
  const child = spawn(opts.binary || JAILBOXD, opts.args || [], {
    // no jailbox-worker unless a test passes JAILBOX_WORKERS
    env: { ...process.env, JAILBOX_LISTEN: '127.0.0.1:0', JAILBOX_WORKERS: '0', JAILBOX_STATE_DIR: state,
           JAILBOX_WORKSPACE_ROOT: wsroot, JAILBOX_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('jailboxd did not start:\n' + log)), 60000);
    child.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/"msg":"listening","addr":"([^"]+)"/);
      if (m) { clearTimeout(t); resolve('http://' + m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(t); reject(new Error(`jailboxd exited ${code}:\n${log}`)); });
  });
  child.removeAllListeners('exit');
  const serviceToken = readFileSync(join(state, 'service.token'), 'utf8').trim();
  const db = new pg.Pool({ host: join(state, 'pg/run'), user: 'jailbox', database: 'jailbox', max: 4 });
  // an idle connection of the test's own pool cut by a PostgreSQL stop (the server's, or a
  // restart a test makes) is only logged: a query on it fails where the test makes it
  db.on('error', (e) => console.log(`# the test's database pool: an idle connection ended: ${e.message}`));
  const srv = {
    url, state, wsroot, dir, serviceToken, db, child,
    log: () => log,
    async req(method, path, { token, body, raw, headers = {} } = {}) {
      const h = { ...headers };
      if (token) h.authorization = 'Bearer ' + token;
      let payload;
      if (raw !== undefined) payload = raw;
      else if (body !== undefined) { payload = JSON.stringify(body); h['content-type'] = 'application/json'; }
      let r;
      for (let attempt = 0; ; attempt++) {
        try { r = await fetch(url + path, { method, headers: h, body: payload }); break; }
        catch (e) { // undici says only 'fetch failed': name the cause (reset, refused, closed)
          const c = e.cause || {};
          // a kept-alive connection the server closed while this process was busy (a test
          // writing hundreds of MiB blocks the event loop past the server's idle timeout):
          // a GET is sent again once, on a new connection
          if (method === 'GET' && attempt === 0 && c.code === 'UND_ERR_SOCKET') continue;
          throw new Error(`${method} ${path}: ${e.message}: ${c.code || ''} ${c.message || c}`, { cause: e });
        }
      }
      const text = await r.text();
      let json;
      try { json = JSON.parse(text); } catch { json = undefined; }
      return { status: r.status, json, text, headers: r.headers };
    },
    // opens a session in workspace `name` (created under the root) and returns its tokens
    async open(extra = {}) {
      const ws = extra.workspace || 'ws-' + Math.random().toString(36).slice(2);
      mkdirSync(join(wsroot, ws), { recursive: true });
      const r = await srv.req('POST', '/v1/jailbox', { token: serviceToken,
        body: { agentId: 'agent-1', workspace: ws, ...extra } });
      if (r.status !== 201) throw new Error(`open: ${r.status} ${r.text}`);
      return r.json;
    },
    // test fixture: puts a session in `state` as later components (worker, agent) would
    async setState(jobId, state) {
      await db.query('UPDATE sessions SET state = $2 WHERE job_id = $1', [jobId, state]);
    },
    // test fixture: a pending write op, as an agent's write in supervised mode creates
    async pendingOp(jobId, path = 'src/a.c') {
      const r = await db.query(
        "INSERT INTO ops (job_id, tool, path, args, state) VALUES ($1, 'write', $2, '{}', 'pending') RETURNING op_id",
        [jobId, path]);
      return Number(r.rows[0].op_id);
    },
    async stop() {
      await db.end();
      // a server that died already (a crash the test reports) has no exit event left to wait for
      const done = child.exitCode !== null || child.signalCode !== null
        ? Promise.resolve({ code: child.exitCode, sig: child.signalCode })
        : new Promise((res) => child.on('exit', (code, sig) => res({ code, sig })));
      child.kill('SIGTERM');
      const r = await done;
      rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
  return srv;
}
