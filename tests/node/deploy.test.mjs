// deploy.test.mjs — the deployment artifacts in deploy/ checked offline: the Kubernetes
// manifests and the compose file parse and hold together (probes, selectors, ports, routes,
// every JAILBOX_* name a real setting), the nginx configurations pass `nginx -t`, the
// systemd units pass `systemd-analyze verify` where systemd is there, the Dockerfile names
// Debian packages that exist, and the offline image (deploy/image/build.sh) runs jailboxd
// against a real PostgreSQL: /readyz 200, then `docker stop` drains it and it exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { JAILBOXD, ROOT, WORKER, cleanup, freePort, scratch, sleep, startPostgres, waitFor } from './lib/cluster.mjs';

const D = join(ROOT, 'deploy');
const settings = (bin) => new Set(execFileSync(bin, ['--help'], { encoding: 'utf8' }).match(/JAILBOX_[A-Z0-9_]+/g));
const SERVER = settings(JAILBOXD);
const WORKER_SET = settings(WORKER);

function assertSettings(env, known, where) {
  for (const k of Object.keys(env)) if (k.startsWith('JAILBOX_')) assert.ok(known.has(k), `${where}: ${k} is no setting`);
}

test('Kubernetes manifests: Deployment ready on /readyz, workers on gVisor nodes, Service and Ingress routes agree', () => {
  const docs = YAML.parseAllDocuments(readFileSync(join(D, 'k8s/jailbox.yaml'), 'utf8'));
  for (const d of docs) assert.deepEqual(d.errors, [], String(d.errors));
  const objs = docs.map((d) => d.toJS());
  const by = (kind) => objs.filter((o) => o.kind === kind);
  for (const k of ['Namespace', 'RuntimeClass', 'ConfigMap', 'Deployment', 'Service', 'Ingress', 'DaemonSet', 'PodDisruptionBudget'])
    assert.equal(by(k).length, 1, k);
  const [dep] = by('Deployment'), [svc] = by('Service'), [ing] = by('Ingress'), [ds] = by('DaemonSet');
  const [rc] = by('RuntimeClass'), [cm] = by('ConfigMap');
  const c = dep.spec.template.spec.containers[0];
  assert.equal(c.readinessProbe.httpGet.path, '/readyz');
  assert.equal(c.livenessProbe.httpGet.path, '/healthz');
  assert.ok(dep.spec.replicas >= 2);
  assert.deepEqual(dep.spec.selector.matchLabels, dep.spec.template.metadata.labels);
  assert.deepEqual(svc.spec.selector, dep.spec.template.metadata.labels);
  // the drain: readiness fails fast and the grace period covers the drain
  const drainMs = Number(cm.data.JAILBOX_DRAIN_DELAY_MS), graceMs = Number(cm.data.JAILBOX_SHUTDOWN_GRACE_MS);
  assert.ok(c.readinessProbe.periodSeconds * c.readinessProbe.failureThreshold * 1000 < drainMs);
  assert.ok(dep.spec.template.spec.terminationGracePeriodSeconds * 1000 > drainMs + graceMs);
  assertSettings(cm.data, SERVER, 'ConfigMap');
  assertSettings(Object.fromEntries(c.env.map((e) => [e.name, 1])), SERVER, 'jailboxd env');
  const portNames = new Set(c.ports.map((p) => p.name));
  for (const p of svc.spec.ports) assert.ok(portNames.has(p.targetPort), 'Service targetPort ' + p.targetPort);
  assert.equal(cm.data.JAILBOX_LISTEN.split(':')[1], String(c.ports.find((p) => p.name === 'http').containerPort));
  assert.equal(cm.data.JAILBOX_WS_LISTEN.split(':')[1], String(c.ports.find((p) => p.name === 'socketio').containerPort));
  const routes = Object.fromEntries(ing.spec.rules[0].http.paths.map((p) => [p.path, p.backend.service.port.name]));
  assert.deepEqual(routes, { '/socket.io/': 'socketio', '/v1/': 'http' });
  for (const p of ing.spec.rules[0].http.paths) assert.equal(p.backend.service.name, svc.metadata.name);
  // workers only where gVisor is: the RuntimeClass and the DaemonSet select the same nodes
  assert.equal(rc.handler, 'runsc');
  assert.deepEqual(ds.spec.template.spec.nodeSelector, rc.scheduling.nodeSelector);
  const w = ds.spec.template.spec.containers[0];
  assert.deepEqual(w.command, ['/opt/jailbox/bin/jailbox-worker']);
  assertSettings(Object.fromEntries(w.env.map((e) => [e.name, 1])), WORKER_SET, 'worker env');
  assert.ok(ds.spec.template.spec.volumes.some((v) => v.hostPath?.path === '/var/run/docker.sock'));
  assert.equal(cm.data.JAILBOX_WORKERS, '0', 'jailboxd pods start no workers of their own');
});

test('compose file: PostgreSQL, Redis, two jailboxd, a worker and nginx; settings are real', () => {
  const doc = YAML.parseDocument(readFileSync(join(D, 'compose/compose.yaml'), 'utf8'), { merge: true });
  assert.deepEqual(doc.errors, []);
  const c = doc.toJS({ maxAliasCount: 100 });
  assert.deepEqual(Object.keys(c.services).sort(), ['jailboxd-a', 'jailboxd-b', 'nginx', 'postgres', 'redis', 'worker']);
  for (const n of ['jailboxd-a', 'jailboxd-b']) {
    const s = c.services[n];
    assert.equal(s.image, 'jailbox:latest');
    assertSettings(s.environment, SERVER, n);
    assert.match(s.environment.JAILBOX_REDIS_URL, /^redis:\/\/:\$\{REDIS_PASSWORD[^}]*\}@redis:6379$/);
    assert.match(s.environment.JAILBOX_DATABASE_URL, /@postgres:5432\//);
  }
  assertSettings(c.services.worker.environment, WORKER_SET, 'worker');
  assert.ok(c.services.redis.command.includes('--requirepass'), 'Redis has a password');
  assert.equal(c.services.redis.ports, undefined, 'Redis is not published');
  // compose's nginx site is deploy/nginx/jailbox.conf with the service names as upstreams
  const norm = (t) => t.split('\n').filter((l) => !/^\s*server \S+ max_fails|^\s*listen |^#/.test(l)).join('\n');
  assert.equal(norm(readFileSync(join(D, 'compose/nginx.conf'), 'utf8')), norm(readFileSync(join(D, 'nginx/jailbox.conf'), 'utf8')));
  const r = spawnSync('docker-compose', ['-f', join(D, 'compose/compose.yaml'), 'config', '-q'], { encoding: 'utf8' });
  if (!r.error) assert.equal(r.status, 0, r.stderr); // only where docker-compose is installed
});

test('nginx configurations pass nginx -t', () => {
  const dir = scratch('jbnginx-');
  try {
    // the single-host nginx.conf with its include pointed at the sample site
    mkdirSync(join(dir, 'logs'));
    let main = readFileSync(join(D, 'nginx/nginx.conf'), 'utf8');
    assert.match(main, /include \/etc\/jailbox\/nginx\/jailbox\.conf;/);
    main = main.replace('/etc/jailbox/nginx/jailbox.conf', join(dir, 'jailbox.conf'))
      .replace(/pid [^;]+;/, `pid ${dir}/nginx.pid;`).replace(/error_log [^;]+;/, `error_log ${dir}/logs/e.log;`)
      .replace(/access_log [^;]+;/, `access_log ${dir}/logs/a.log;`);
    writeFileSync(join(dir, 'nginx.conf'), main);
    copyFileSync(join(D, 'nginx/jailbox.conf'), join(dir, 'jailbox.conf'));
    execFileSync('nginx', ['-t', '-q', '-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'pipe' });
    // compose's site, with its service names resolvable here
    writeFileSync(join(dir, 'jailbox.conf'), readFileSync(join(D, 'compose/nginx.conf'), 'utf8').replace(/jailboxd-[ab]/g, '127.0.0.1'));
    execFileSync('nginx', ['-t', '-q', '-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'pipe' });
    // a broken site is refused: the check can fail
    writeFileSync(join(dir, 'jailbox.conf'), 'upstream x { server; }');
    assert.notEqual(spawnSync('nginx', ['-t', '-q', '-p', dir, '-c', join(dir, 'nginx.conf')]).status, 0);
  } finally { cleanup(dir); }
});

test('systemd units verify; every JAILBOX_ name in deploy/ is a real setting', () => {
  const units = readdirSync(join(D, 'systemd')).filter((f) => /\.service$/.test(f));
  assert.deepEqual(units.sort(), ['jailbox-nginx.service', 'jailbox-worker.service', 'jailboxd@.service']);
  const have = spawnSync('systemd-analyze', ['--version']);
  if (!have.error) {
    const dir = scratch('jbunits-');
    try {
      for (const u of units) {
        // verify needs the binaries: point ExecStart at the build's
        const t = readFileSync(join(D, 'systemd', u), 'utf8').replace('/usr/local/bin/jailboxd', JAILBOXD)
          .replace('/usr/local/bin/jailbox-worker', WORKER);
        writeFileSync(join(dir, u.replace('@.service', '@a.service')), t);
      }
      const r = spawnSync('systemd-analyze', ['verify', '--man=no', ...readdirSync(dir).map((f) => join(dir, f))], { encoding: 'utf8' });
      // only complaints about our own lines count (dependencies named in After= may be absent here)
      const ours = (r.stderr || '').split('\n').filter((l) => /jailbox/.test(l) && !/not found|No such file|Failed to .*dependenc|was not found/i.test(l));
      assert.deepEqual(ours, [], r.stderr);
    } finally { cleanup(dir); }
  }
  const known = new Set([...SERVER, ...WORKER_SET]);
  for (const f of ['systemd/jailboxd@.service', 'systemd/jailbox-worker.service', 'compose/compose.yaml', 'k8s/jailbox.yaml', 'Dockerfile', 'image/build.sh'])
    for (const k of readFileSync(join(D, f), 'utf8').match(/JAILBOX_[A-Z0-9_]+/g) || [])
      assert.ok(known.has(k), `${f}: ${k} is no setting of jailboxd or jailbox-worker`);
});

test('Dockerfile: the Debian packages it installs exist', (t) => {
  const df = readFileSync(join(D, 'Dockerfile'), 'utf8');
  const pkgs = [...df.matchAll(/apt-get install -y --no-install-recommends([^&]+)&&/g)]
    .flatMap((m) => m[1].replace(/\\\n/g, ' ').split(/\s+/).filter((p) => /^[a-z0-9][a-z0-9.+-]+$/.test(p)));
  assert.ok(pkgs.includes('libhiredis0.14') && pkgs.includes('libhiredis-dev'), pkgs.join(' '));
  const r = spawnSync('apt-cache', ['show', '--no-all-versions', ...pkgs], { encoding: 'utf8' });
  if (r.error || !/^Package:/m.test(r.stdout)) return t.skip('no apt lists on this machine');
  const found = new Set([...r.stdout.matchAll(/^Package: (\S+)/gm)].map((m) => m[1]));
  for (const p of pkgs) assert.ok(found.has(p), 'no Debian package ' + p);
});

test('offline image: jailboxd runs from it against PostgreSQL and drains on docker stop', { timeout: 300000 }, async () => {
  execFileSync(join(D, 'start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(D, 'image/build.sh'), ['--build', join(JAILBOXD, '..'), '--tag', 'jailbox:deploytest'], { stdio: 'inherit' });
  const dir = scratch('jbimage-');
  const pg = await startPostgres(dir);
  const port = await freePort(), wsport = await freePort();
  const name = 'jailbox-deploytest-' + process.pid;
  try {
    execFileSync('docker', ['run', '-d', '--name', name, '--network', 'host',
      '-v', `${pg.host}:${pg.host}`, '-e', 'JAILBOX_DATABASE_URL=' + pg.url,
      '-e', `JAILBOX_LISTEN=127.0.0.1:${port}`, '-e', `JAILBOX_WS_LISTEN=127.0.0.1:${wsport}`,
      '-e', 'JAILBOX_DRAIN_DELAY_MS=300', 'jailbox:deploytest'], { stdio: 'pipe' });
    const ready = await waitFor('readyz 200 from the container', async () => {
      try { return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200; } catch { return false; }
    }, 60000, () => spawnSync('docker', ['logs', name], { encoding: 'utf8' }).stderr);
    assert.ok(ready);
    const user = execFileSync('docker', ['exec', name, '/opt/jailbox/bin/jailboxd', '--routes'], { encoding: 'utf8' });
    assert.match(user, /GET \/metrics/);
    execFileSync('docker', ['stop', '-t', '30', name], { stdio: 'pipe' });
    const code = execFileSync('docker', ['inspect', '-f', '{{.State.ExitCode}}', name], { encoding: 'utf8' }).trim();
    const logs = spawnSync('docker', ['logs', name], { encoding: 'utf8' }).stderr;
    assert.equal(code, '0', logs);
    assert.match(logs, /"msg":"shutting down","signal":"SIGTERM"/);
    assert.match(logs, /"msg":"stopped"/);
  } finally {
    spawnSync('docker', ['rm', '-f', name]);
    spawnSync('docker', ['rmi', 'jailbox:deploytest']);
    pg.stop();
    await sleep(100);
    cleanup(dir);
  }
});
