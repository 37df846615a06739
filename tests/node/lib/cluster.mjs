// cluster.mjs — the real processes of a horizontally scaled jailbox on this host, for tests
// and bench/scale: a PostgreSQL cluster of its own (Unix socket), redis-server, N jailboxd
// instances on that database (external DB mode), standalone jailbox-worker processes, and
// nginx in front with deploy/nginx/jailbox.conf. Every process is started here and stopped
// by the returned handles; all listen on 127.0.0.1 or Unix sockets only.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = join(here, '../../..');
export const JAILBOXD = process.env.JAILBOXD || join(ROOT, 'build/jailboxd');
export const WORKER = join(dirname(JAILBOXD), 'jailbox-worker');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(what, fn, timeoutMs = 30000, log = () => '') {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what + '\n' + String(log()).slice(-4000));
    await sleep(50);
  }
}

// a TCP port free right now on 127.0.0.1
export function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
  });
}

function pgBindir() {
  const base = '/usr/lib/postgresql';
  const v = readdirSync(base).filter((d) => existsSync(join(base, d, 'bin/initdb'))).sort((a, b) => b - a)[0];
  if (!v) throw new Error('no PostgreSQL server binaries under ' + base);
  return join(base, v, 'bin');
}

function uidOf(user) {
  return Number(execFileSync('id', ['-u', user]).toString().trim());
}

// A scratch directory for one cluster; removed by cleanup().
export function scratch(prefix = 'jbscale-') {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o711);
  return dir;
}

// PostgreSQL run by the unprivileged 'jailbox' user, listening on a Unix socket only.
export async function startPostgres(dir) {
  const bin = pgBindir();
  const data = join(dir, 'pg'), run = join(dir, 'pg-run');
  mkdirSync(data); mkdirSync(run);
  const uid = uidOf('jailbox');
  chownSync(data, uid, -1); chownSync(run, uid, -1);
  const su = (cmd) => execFileSync('su', ['-s', '/bin/sh', 'jailbox', '-c', cmd], { stdio: 'pipe' });
  su(`${bin}/initdb -D '${data}' -U ext -A trust --no-instructions`);
  // enough connections for several instances' pools, their listeners and the workers
  su(`${bin}/pg_ctl -D '${data}' -l '${run}/pg.log' -w -o "-c listen_addresses='' -k ${run} -c max_connections=200 -c fsync=off" start`);
  return {
    url: `postgresql:///postgres?host=${run}&user=ext`,
    host: run,
    stop() { try { su(`${bin}/pg_ctl -D '${data}' -m fast -w stop`); } catch { /* already down */ } },
  };
}

// redis-server on `port` (0: a free one) and a Unix socket, with a password (AUTH), no
// persistence. restart() starts it again on the same port and socket, as an operator
// bringing Redis back would. .url is the TCP form, .unixUrl the socket form; .cli(...args)
// runs redis-cli against it.
export async function startRedis(dir, port = 0) {
  if (!port) port = await freePort();
  const password = randomBytes(12).toString('hex');
  const sock = join(dir, 'redis.sock');
  let child;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--protected-mode', 'yes', '--requirepass', password, '--unixsocket', sock, '--unixsocketperm', '700'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    await waitFor('redis-server ready', () => /Ready to accept connections/.test(out), 10000, () => out);
  };
  await start();
  const r = {
    port,
    url: `redis://:${password}@127.0.0.1:${port}`,
    unixUrl: `unix://:${password}@${sock}`,
    get pid() { return child.pid; },
    cli: (...a) => execFileSync('redis-cli', ['-p', String(port), '--no-auth-warning', '-a', password, ...a], { encoding: 'utf8' }),
    async stop() {
      if (!child || child.exitCode !== null) return;
      const done = new Promise((res) => child.once('exit', res));
      child.kill('SIGKILL'); // an outage, not a clean shutdown
      await done;
    },
    async restart() { await start(); },
  };
  return r;
}

// A bootstrap service token and an audit signing key shared by every instance (in a real
// deployment: a Kubernetes Secret or files under /etc/jailbox).
export function sharedSecrets(dir) {
  const token = 'jbt_' + randomBytes(32).toString('base64url');
  const tokenFile = join(dir, 'service.token');
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  const keyFile = join(dir, 'audit-signing.key');
  writeFileSync(keyFile, randomBytes(32).toString('hex') + '\n', { mode: 0o600 });
  return { token, tokenFile, keyFile };
}

// One jailboxd on the shared database. Resolves once it listens; .url (REST) and .wsAddr.
export async function startInstance(name, dir, { pg, redis, redisUrl, secrets, wsroot, env = {} }) {
  const state = join(dir, name);
  const child = spawn(JAILBOXD, [], {
    env: {
      ...process.env, JAILBOX_LISTEN: '127.0.0.1:0', JAILBOX_WS_LISTEN: '127.0.0.1:0', JAILBOX_WORKERS: '0',
      JAILBOX_STATE_DIR: state, JAILBOX_WORKSPACE_ROOT: wsroot, JAILBOX_DATABASE_URL: pg.url,
      JAILBOX_SERVICE_TOKEN_FILE: secrets.tokenFile, JAILBOX_SIGNING_KEY_FILE: secrets.keyFile,
      JAILBOX_LOG_LEVEL: 'info', JAILBOX_WS_WORKERS: '8',
      ...(redis ? { JAILBOX_REDIS_URL: redisUrl || redis.url } : {}), ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((res) => child.once('exit', (code, sig) => res({ code, sig })));
  await Promise.race([
    waitFor(name + ' listening', () => /"msg":"listening"/.test(log) && /"msg":"ws listening"/.test(log), 60000, () => log),
    exited.then((r) => { throw new Error(`${name} exited ${JSON.stringify(r)}:\n${log}`); }),
  ]);
  const inst = {
    name, child, exited, state,
    url: 'http://' + log.match(/"msg":"listening","addr":"([^"]+)"/)[1],
    wsAddr: log.match(/"msg":"ws listening","addr":"([^"]+)"/)[1],
    log: () => log,
    async req(method, path, { token = secrets.token, body } = {}) {
      const h = {};
      if (token) h.authorization = 'Bearer ' + token;
      let payload;
      if (body !== undefined) { payload = JSON.stringify(body); h['content-type'] = 'application/json'; }
      const r = await fetch(inst.url + path, { method, headers: h, body: payload });
      const text = await r.text();
      let json;
      try { json = JSON.parse(text); } catch { json = undefined; }
      return { status: r.status, json, text, headers: r.headers };
    },
    // /metrics as {name{labels}: value}
    async metrics() {
      const r = await inst.req('GET', '/metrics');
      if (r.status !== 200) throw new Error(`${name} /metrics: ${r.status} ${r.text}`);
      return parseMetrics(r.text);
    },
    async stop(sig = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill(sig);
      return exited;
    },
  };
  return inst;
}

// Prometheus text → {"name{labels}": number}; throws on a line that is not a sample,
// comment or blank (the exposition format 0.0.4).
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})?) (\S+)$/);
    if (!m) throw new Error('not a sample line: ' + JSON.stringify(line));
    out[m[1]] = m[2] === '+Inf' ? Infinity : Number(m[2]);
  }
  return out;
}

// A standalone jailbox-worker on the shared database ("workers elsewhere").
export async function startWorker(name, dir, { pg, secrets, wsroot, env = {} }) {
  const child = spawn(WORKER, [], {
    env: { ...process.env, JAILBOX_DATABASE_URL: pg.url, JAILBOX_WORKER_ID: name,
           JAILBOX_SIGNING_KEY_FILE: secrets.keyFile, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((res) => child.once('exit', (code, sig) => res({ code, sig })));
  await Promise.race([
    waitFor(name + ' ready', () => /"msg":"worker ready"/.test(log), 120000, () => log),
    exited.then((r) => { throw new Error(`${name} exited ${JSON.stringify(r)}:\n${log}`); }),
  ]);
  return {
    child, log: () => log,
    // SIGINT (the default): every session of the worker ends with it and its container is
    // removed, as a test's end wants; SIGTERM is the upgrade's drain, which leaves them running
    async stop(sig = 'SIGINT') {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill(sig);
      return exited;
    },
  };
}

// deploy/nginx/jailbox.conf with this cluster's addresses and `port`.
export function renderNginx(instances, port) {
  let conf = readFileSync(join(ROOT, 'deploy/nginx/jailbox.conf'), 'utf8');
  const block = (name, addrs) => {
    const re = new RegExp(`upstream ${name} \\{[^}]*\\}`);
    if (!re.test(conf)) throw new Error('deploy/nginx/jailbox.conf has no upstream ' + name);
    conf = conf.replace(re, `upstream ${name} {\n` +
      addrs.map((a) => `    server ${a} max_fails=1 fail_timeout=2s;\n`).join('') + '}');
  };
  block('jailbox_rest', instances.map((i) => i.url.replace('http://', '')));
  block('jailbox_socketio', instances.map((i) => i.wsAddr));
  if (!/listen 127\.0\.0\.1:8000;/.test(conf)) throw new Error('deploy/nginx/jailbox.conf: listen line changed');
  return conf.replace('listen 127.0.0.1:8000;', `listen 127.0.0.1:${port};`);
}

// nginx in the foreground with a main config of its own around the rendered site.
export async function startNginx(dir, instances) {
  const port = await freePort();
  const nd = join(dir, 'nginx');
  mkdirSync(join(nd, 'tmp'), { recursive: true });
  writeFileSync(join(nd, 'jailbox.conf'), renderNginx(instances, port));
  writeFileSync(join(nd, 'nginx.conf'), `worker_processes 1;
daemon off;
pid ${nd}/nginx.pid;
error_log ${nd}/error.log info;
events { worker_connections 1024; }
http {
  access_log ${nd}/access.log;
  client_body_temp_path ${nd}/tmp/body;
  proxy_temp_path ${nd}/tmp/proxy;
  fastcgi_temp_path ${nd}/tmp/fastcgi;
  uwsgi_temp_path ${nd}/tmp/uwsgi;
  scgi_temp_path ${nd}/tmp/scgi;
  include ${nd}/jailbox.conf;
}
`);
  const conf = join(nd, 'nginx.conf');
  execFileSync('nginx', ['-t', '-q', '-c', conf, '-p', nd], { stdio: 'pipe' });
  const child = spawn('nginx', ['-c', conf, '-p', nd], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((res) => child.once('exit', (code, sig) => res({ code, sig })));
  await waitFor('nginx listening', () => new Promise((res) => {
    const s = net.connect(port, '127.0.0.1', () => { s.destroy(); res(true); });
    s.on('error', () => res(false));
  }), 10000, () => log);
  return {
    port, url: `http://127.0.0.1:${port}`, conf,
    errors: () => { try { return readFileSync(join(nd, 'error.log'), 'utf8'); } catch { return ''; } },
    async stop() {
      if (child.exitCode !== null) return exited;
      child.kill('SIGQUIT');
      return exited;
    },
  };
}

export function cleanup(dir) {
  rmSync(dir, { recursive: true, force: true });
}
