// server.mjs — starts a real jailboxd (embedded PostgreSQL in a temp state directory) for a
// test file, and gives the test a service token, a pg client on the same database, and small
// HTTP helpers. Needs JAILBOXD (path of the binary) or the default build.
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, chmodSync } from 'node:fs';
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
  child.stderr.on('data', (d) => { log += d; });
  // the exit, whenever it comes: a server that dies after its start (a crash) is named by the
  // request that meets its closed port and by every wait on it (srv.crashed)
  let exit = null;
  const exited = new Promise((res) => child.once('exit', (code, sig) => res(exit = { code, sig })));
  // ready when it logs "listening": jailboxd logs it once its HTTP port listens (bound and
  // listen(2) done), the Socket.IO one too ("ws listening", before) and its workers started
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('jailboxd did not log "listening" within 60 s:\n' + log)), 60000);
    const onData = () => {
      const m = log.match(/"msg":"listening","addr":"([^"]+)"/);
      if (m) { clearTimeout(t); child.stderr.off('data', onData); resolve('http://' + m[1]); }
    };
    child.stderr.on('data', onData);
    child.once('error', (e) => { clearTimeout(t); reject(new Error(`jailboxd did not start: ${e.message}`)); });
    exited.then((r) => { clearTimeout(t); reject(new Error(`${exitText(r)} before listening:\n${log}`)); });
  });
  const serviceToken = readFileSync(join(state, 'service.token'), 'utf8').trim();
  const db = new pg.Pool({ host: join(state, 'pg/run'), user: 'jailbox', database: 'jailbox', max: 4 });
  // an idle connection of the test's own pool cut by a PostgreSQL stop (the server's, or a
  // restart a test makes) is only logged: a query on it fails where the test makes it
  db.on('error', (e) => console.log(`# the test's database pool: an idle connection ended: ${e.message}`));
  const srv = {
    url, state, wsroot, dir, serviceToken, db, child, exited,
    log: () => log,
    // null while jailboxd runs or when it stopped as told (exit 0, SIGTERM, SIGINT, SIGKILL);
    // otherwise what ended it ("jailboxd exited with code 1"): a crash, a sanitizer's report
    crashed: () => (exit && !(exit.code === 0 || ['SIGTERM', 'SIGINT', 'SIGKILL'].includes(exit.sig)) ? exitText(exit) : null),
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
          throw new Error(`${method} ${path}: ${e.message}: ${c.code || ''} ${c.message || c}` + await whyDown(c.code), { cause: e });
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
      child.kill('SIGTERM'); // nothing when it died already: `exited` holds how
      const r = await exited;
      // a jailboxd that crashed did not stop what it started: its worker (which writes to the
      // stderr pipe read here, so that this process would never end), the worker's keeper
      // and the embedded PostgreSQL are ended, found by the state directory they name
      if (srv.crashed()) endLeftovers(state);
      rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
  // a connection refused or cut may be jailboxd's death: its exit is awaited (bounded: the
  // port closes as the process ends, its exit is reported a moment later) and named, with
  // the end of its log (a sanitizer's report)
  async function whyDown(code) {
    if (!['ECONNREFUSED', 'ECONNRESET', 'UND_ERR_SOCKET'].includes(code)) return '';
    let timer;
    await Promise.race([exited, new Promise((r) => { timer = setTimeout(r, 2000); })]);
    clearTimeout(timer);
    return exit ? `\n${exitText(exit)}; its log ends:\n${log.slice(-6000)}` : '';
  }
  return srv;
}

// SIGKILL to every process whose command line or environment names `state` (a jailboxd's
// state directory: its workers have JAILBOX_STATE_DIR, its PostgreSQL and keeper a path in it)
function endLeftovers(state) {
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid)) {
    try {
      const names = readFileSync(`/proc/${pid}/cmdline`, 'utf8') + readFileSync(`/proc/${pid}/environ`, 'utf8');
      if (names.includes(state + '/') || names.includes(state + '\0')) process.kill(Number(pid), 'SIGKILL');
    } catch { /* gone, or not ours to read */ }
  }
}

// "jailboxd exited with code N" or "jailboxd was killed by SIGNAL"
function exitText({ code, sig }) {
  return sig ? `jailboxd was killed by ${sig}` : `jailboxd exited with code ${code}`;
}
