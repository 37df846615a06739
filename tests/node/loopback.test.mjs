// loopback.test.mjs — a command's own loopback: an agent (the official MCP SDK client over
// Streamable HTTP) in an unsupervised session on the build image (build.sh --userland, cached
// under var/sandbox-image/; it has python3) runs `python3 -m http.server` on 127.0.0.1 and a
// client in the same command (TCP over 127.0.0.1 and ::1, UDP); each command is in a network
// namespace of its own (the spawner's clone(CLONE_NEWNET)), which is neither the shim's nor the
// previous command's, so a second command finds nothing at the first's port; no address outside
// answers (runsc --network=none routes nothing out); raw and netlink sockets stay refused; a
// unittest suite that binds 127.0.0.1:0 passes; calls sent 0 ms after the open are answered.
// Needs root, Docker with runsc, debootstrap and deb.debian.org for the first --userland build.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startServer, JAILBOXD } from './lib/server.mjs';
import { ROOT } from './lib/jail.mjs';
import { agentKit } from './lib/agent.mjs';
import { connectClient } from './lib/mcp.mjs';

const BUILD = 'jailbox-sandbox-build:loopback' + (process.env.JB_IMAGE_SUFFIX ?? '');
const PORT = 8765;

let K, srv, A, client;

before(async () => {
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--userland', '--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', BUILD], { stdio: 'inherit' });
  srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: BUILD, JAILBOX_SANDBOX_IMAGES: BUILD });
  K = agentKit(srv);
  await K.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()));
  A = await K.openSession(() => {}, { mode: 'unsupervised', image: BUILD });
  client = await connectClient('http', K, A, 'loopback');
});

after(async () => {
  await client?.close().catch(() => {});
  K?.closeSockets();
  if (srv) {
    const log = srv.log();
    await srv.stop();
    assert.doesNotMatch(log, /ERROR: (Address|Leak)Sanitizer|runtime error:/, log);
  }
});

// one command's structured result, asserted to have run and exited 0
async function run(argv) {
  const r = await client.callTool({ name: 'exec', arguments: { argv, timeoutSec: 60 } }, undefined, { timeout: 120000 });
  assert.ok(!r.isError, JSON.stringify(r).slice(0, 1500));
  const s = r.structuredContent;
  assert.equal(s.exitCode, 0, JSON.stringify(s));
  return s;
}

// probe.py (written with the `write` tool) prints one JSON line: the command's network namespace and what it saw
const PROBE = `
import json, os, socket, sys, urllib.request, time
out = {'netns': os.readlink('/proc/self/ns/net'), 'ifs': [l.split(':')[0].strip() for l in open('/proc/net/dev') if ':' in l]}
def tcp(host, port, timeout=3):
    try:
        socket.create_connection((host, port), timeout=timeout).close(); return 'connected'
    except OSError as e: return type(e).__name__ + ':' + str(e.errno)
mode = sys.argv[1]
if mode == 'serve':
    for i in range(100):
        try:
            out['http'] = urllib.request.urlopen('http://127.0.0.1:${PORT}/', timeout=5).status; break
        except OSError: time.sleep(0.1)
    s6 = socket.socket(socket.AF_INET6); s6.bind(('::1', 0)); s6.listen(1)
    out['tcp6'] = tcp('::1', s6.getsockname()[1])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.sendto(b'hi', u.getsockname())
    out['udp'] = u.recv(8).decode()
else:
    out['first'] = tcp('127.0.0.1', ${PORT})
    out['outside'] = {h: tcp(h, 80, 2) for h in ('172.17.0.1', '10.0.0.1', '1.1.1.1')}
    for name, fam, typ in (('raw', socket.AF_INET, socket.SOCK_RAW), ('netlink', socket.AF_NETLINK, socket.SOCK_RAW)):
        try: socket.socket(fam, typ).close(); out[name] = 'ok'
        except OSError as e: out[name] = e.errno
print(json.dumps(out))
`;

let first;

test('a command serves HTTP on 127.0.0.1 and talks to it; TCP on ::1 and UDP work too', async () => {
  const w = await client.callTool({ name: 'write', arguments: { path: 'probe.py', content: PROBE } });
  assert.ok(!w.isError, JSON.stringify(w));
  const s = await run(['sh', '-c', `python3 -m http.server --bind 127.0.0.1 ${PORT} >/dev/null 2>&1 & python3 probe.py serve`]);
  first = JSON.parse(s.stdout.trim());
  console.log('# first command:', JSON.stringify(first));
  assert.equal(first.http, 200, s.stdout + s.stderr);
  assert.equal(first.tcp6, 'connected');
  assert.equal(first.udp, 'hi');
  assert.deepEqual(first.ifs, ['lo'], 'lo is the only interface');
});

test('the next command has a namespace of its own: the first\'s port and nothing outside answers', async () => {
  const s = await run(['python3', 'probe.py', 'probe']);
  const second = JSON.parse(s.stdout.trim());
  console.log('# second command:', JSON.stringify(second));
  assert.match(second.netns, /^net:\[\d+\]$/);
  assert.notEqual(second.netns, first.netns, 'a fresh namespace per command');
  const shimNet = (await K.sessionOf(A.jobId)).walls.jailSeenFromInside.namespaces.net;
  assert.notEqual(second.netns, `net:[${shimNet}]`, 'not the container\'s (the shim\'s) namespace');
  assert.equal(second.first, 'ConnectionRefusedError:111');
  for (const [h, v] of Object.entries(second.outside)) assert.doesNotMatch(v, /connected/, h);
  assert.equal(second.raw, 1, 'raw sockets: EPERM');
  assert.equal(second.netlink, 1, 'netlink sockets: EPERM');
  assert.match((await K.sessionOf(A.jobId)).walls.exec.jail.network, /^loopback only/);
});

// A test suite of the image's language as projects write them: unittest cases that start an
// HTTP server on 127.0.0.1:0 (a port the kernel picks) and a client against it.
const SUITE = `
import http.server, threading, unittest, urllib.request
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'pong'
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class ServerTest(unittest.TestCase):
    def setUp(self):
        self.srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Hello)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
    def tearDown(self):
        self.srv.shutdown(); self.srv.server_close()
    def test_get(self):
        port = self.srv.server_address[1]
        self.assertEqual(urllib.request.urlopen(f'http://127.0.0.1:{port}/ping', timeout=5).read(), b'pong')
    def test_two_servers(self):
        other = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Hello)
        self.assertNotEqual(other.server_address[1], self.srv.server_address[1])
        other.server_close()
`;

test('a unittest suite that binds 127.0.0.1:0 passes', async () => {
  const w = await client.callTool({ name: 'write', arguments: { path: 'test_srv.py', content: SUITE } });
  assert.ok(!w.isError, JSON.stringify(w));
  const s = await run(['python3', '-m', 'unittest', '-v', 'test_srv']);
  assert.match(s.stderr, /Ran 2 tests/);
  assert.match(s.stderr, /\nOK\n/);
});

// The toolchain image as a new agent meets it: calls sent right after POST /v1/jailbox answers
// (the session still created or prescanning) wait for it and are answered once it is active,
// in both modes; an exec among them runs (python3 is there).
for (const mode of ['unsupervised', 'supervised']) {
  test(`${mode}: calls sent 0 ms after the open are answered on the toolchain image`, { timeout: 180000 }, async () => {
    const name = 'ws-' + Math.random().toString(36).slice(2);
    mkdirSync(join(srv.wsroot, name), { recursive: true });
    writeFileSync(join(srv.wsroot, name, 'a.txt'), 'hello\n');
    await srv.req('GET', '/healthz');
    const S = await srv.open({ workspace: name, mode, image: BUILD });
    const c = await connectClient('http', K, S, 'early-' + mode);
    try {
      const calls = [c.callTool({ name: 'read', arguments: { path: 'a.txt' } }, undefined, { timeout: 150000 }),
        c.callTool({ name: 'list', arguments: {} }, undefined, { timeout: 150000 })];
      if (mode === 'unsupervised')
        calls.push(c.callTool({ name: 'exec', arguments: { argv: ['python3', '-c', 'print(6*7)'] } }, undefined, { timeout: 150000 }));
      const st = (await K.sessionOf(S.jobId)).state;
      assert.ok(['created', 'prescanning', 'awaiting_agent'].includes(st), st);
      const [r, l, x] = await Promise.all(calls);
      assert.ok(!r.isError && !l.isError, JSON.stringify([r, l]).slice(0, 1500));
      assert.equal(r.structuredContent.content, 'hello\n');
      assert.ok(l.structuredContent.entries.some((e) => e.name === 'a.txt'));
      if (x) assert.equal(x.structuredContent?.stdout, '42\n', JSON.stringify(x).slice(0, 1500));
      assert.equal((await K.sessionOf(S.jobId)).state, 'active');
    } finally {
      await c.close().catch(() => {});
    }
  });
}
