// agent.mjs — what a node test needs to drive sessions with real workers: a jailboxd with a
// jailbox-worker and a sandbox image built from this build's shim, sessions on workspaces
// built by the test, socket.io-client sockets for buyers and agents, and MCP tools/call
// helpers (answer, refusal with its reason). Needs root, Docker with runsc.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { io } from 'socket.io-client';
import { startServer, JAILBOXD } from './server.mjs';
import { waitEvent as waitEventOf } from './jail.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../../..');

// The failure of an MCP tools/call answer `r`, as {code, message, data: {reason, …}}: a JSON-RPC
// error (unknown tool, invalid arguments, unavailable) as it is, or a CallToolResult with
// isError (a tool-execution failure: structuredContent.error {reason, code}); undefined when
// the call succeeded.
export function toolFailure(r) {
  if (r?.error) return r.error;
  if (r?.result?.isError) {
    const e = r.result.structuredContent?.error ?? {};
    return { code: e.code, message: r.result.content?.[0]?.text, data: e };
  }
  return undefined;
}

// Starts dockerd (if needed), builds the sandbox image `image` from the shim next to
// JAILBOXD (with the host binaries `extra`, "/HOST/PATH[:/IMAGE/PATH]", added: build.sh
// --extra), and a jailboxd with one worker and `env`. Returns the kit bound to that server.
export async function startSandboxServer(image, env = {}, extra = []) {
  image += process.env.JB_IMAGE_SUFFIX ?? ''; // keeps the images of parallel checkouts apart
  execFileSync(join(ROOT, 'deploy/start-dockerd.sh'), { stdio: 'inherit' });
  execFileSync(join(ROOT, 'deploy/sandbox-image/build.sh'),
    ['--shim', join(dirname(JAILBOXD), 'jailbox-shim'), '--tag', image, ...extra.flatMap((x) => ['--extra', x])],
    { stdio: 'inherit' });
  const srv = await startServer({ JAILBOX_WORKERS: '1', JAILBOX_SANDBOX_IMAGE: image, ...env });
  const kit = agentKit(srv);
  await kit.waitFor('worker ready', () => /"msg":"worker ready"/.test(srv.log()));
  return kit;
}

// The helpers bound to a started server `srv` (lib/server.mjs).
export function agentKit(srv) {
  const wsAddr = srv.log().match(/"msg":"ws listening","addr":"([^"]+)"/)[1];
  const sockets = [];
  let rpcId = 0;
  const kit = {
    srv, wsAddr,
    // `fn()`'s first truthy value within `timeoutMs`; fails at once when jailboxd crashed
    async waitFor(what, fn, timeoutMs = 60000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const crash = srv.crashed();
        if (crash) throw new Error(`${crash} while waiting for ${what}:\n${srv.log().slice(-6000)}`);
        const v = await fn();
        if (v) return v;
        if (Date.now() > end) throw new Error('timed out waiting for ' + what + '\n' + srv.log().slice(-6000));
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async sessionOf(jobId) {
      const r = await srv.req('GET', '/v1/jailbox/' + jobId, { token: srv.serviceToken });
      assert.equal(r.status, 200, r.text);
      return r.json;
    },
    // a socket (buyer or agent by its token) that records every event it receives
    connect(token) {
      const s = io('http://' + wsAddr, { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true });
      s.events = [];
      s.onAny((event, payload) => s.events.push({ event, payload }));
      sockets.push(s);
      return new Promise((res, rej) => { s.once('connect', () => res(s)); s.once('connect_error', rej); });
    },
    // the first event `name` whose payload satisfies `pred`, received already or within `ms`
    waitEvent(s, name, pred = () => true, ms = 20000) {
      return waitEventOf(s, name, pred, ms);
    },
    // an MCP tools/call on the agent's `mcp` channel; the JSON-RPC answer
    async call(agent, name, args, ms = 60000) {
      return agent.timeout(ms).emitWithAck('mcp', { jsonrpc: '2.0', id: ++rpcId, method: 'tools/call', params: { name, arguments: args } });
    },
    async ok(agent, name, args) {
      const r = await kit.call(agent, name, args);
      assert.ok(r.result && !r.result.isError, `${name} ${JSON.stringify(args).slice(0, 200)}: ${JSON.stringify(r.error ?? r.result)}`);
      return r.result.structuredContent;
    },
    // a refused call: the failure as {code, message, data: {reason, …}} (toolFailure)
    async refused(agent, name, args, reason) {
      const r = await kit.call(agent, name, args);
      const f = toolFailure(r);
      assert.ok(f, `${name} ${JSON.stringify(args).slice(0, 200)} was not refused: ${String(JSON.stringify(r)).slice(0, 300)}`);
      if (reason) assert.equal(f.data?.reason, reason, `${name} ${JSON.stringify(args).slice(0, 120)}: ${JSON.stringify(f)}`);
      return f;
    },
    // opens a session on a workspace built by `build(dir)` and waits until its sandbox is up
    async openSession(build, extra = {}) {
      const name = 'ws-' + Math.random().toString(36).slice(2);
      const dir = join(srv.wsroot, name);
      mkdirSync(dir, { recursive: true });
      build(dir);
      // a connection left idle while build ran may have been closed by the server: a GET finds
      // out (and is sent again), so that the open below is not the request that meets it
      await srv.req('GET', '/healthz');
      const s = await srv.open({ workspace: name, ...extra });
      const st = await kit.waitFor('awaiting_agent', async () => {
        const x = await kit.sessionOf(s.jobId);
        return ['awaiting_agent', 'failed'].includes(x.state) ? x : null;
      }, 120000);
      assert.equal(st.state, 'awaiting_agent', st.stateReason);
      return { ...s, dir };
    },
    closeSockets() { for (const s of sockets) s.close(); },
  };
  return kit;
}
