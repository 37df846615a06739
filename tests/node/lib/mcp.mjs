// mcp.mjs — the official MCP SDK client (@modelcontextprotocol/sdk) connected to a session
// over each of the agent's three transports: Streamable HTTP (POST /mcp on jailboxd with the
// agent token as bearer), stdio (`jailboxctl mcp-bridge --job JOB`), and the Socket.IO `mcp`
// event (a small SDK Transport on socket.io-client). Used by mcp.test.mjs and
// refactor.test.mjs with a kit of lib/agent.mjs.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { io } from 'socket.io-client';
import { JAILBOXD } from './server.mjs';

export const CTL = process.env.JAILBOXCTL || join(dirname(JAILBOXD), 'jailboxctl');

// The audit chain of session `jobId` on server `srv`, exported with jailboxctl and verified
// offline against the published keys (asserted: ok, and one verified entry per row): its rows.
export function verifiedChain(srv, jobId) {
  const tmp = mkdtempSync(join(tmpdir(), 'jb-chain-'));
  const env = { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: srv.serviceToken };
  const chain = execFileSync(CTL, ['audit', 'export', jobId], { env, encoding: 'utf8' });
  writeFileSync(join(tmp, 'chain.jsonl'), chain);
  writeFileSync(join(tmp, 'keys.json'), execFileSync(CTL, ['audit', 'keys'], { env, encoding: 'utf8' }));
  const v = JSON.parse(execFileSync(CTL, ['audit', 'verify', join(tmp, 'chain.jsonl'), '--keys', join(tmp, 'keys.json'),
    '--session', jobId, '--json'], { encoding: 'utf8' }));
  assert.equal(v.ok, true, JSON.stringify(v));
  const rows = chain.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(v.entries, rows.length, JSON.stringify(v));
  return rows;
}
export const TRANSPORTS = ['http', 'stdio', 'socket'];

// An SDK Transport over the agent's Socket.IO `mcp` event: a request is emitted with an ack,
// whose argument is the response; a notification is emitted without one; the server's
// notifications (a waiting call's progress) come as `mcp` events. A request waits for
// its ack at most `ackMs` (a supervised call waits for the buyer inside it).
export class SocketIoTransport {
  constructor(url, token, ackMs = 120000) { this.url = url; this.token = token; this.ackMs = ackMs; }
  async start() {
    this.s = io(this.url, { transports: ['websocket'], auth: { token: this.token }, reconnection: false, forceNew: true });
    await new Promise((res, rej) => { this.s.once('connect', res); this.s.once('connect_error', rej); });
    this.s.on('disconnect', () => this.onclose?.());
    this.s.on('mcp', (m) => this.onmessage?.(m)); // the server's notifications (progress)
  }
  async send(msg) {
    if (msg.id === undefined || msg.method === undefined) { this.s.emit('mcp', msg); return; }
    this.s.timeout(this.ackMs).emitWithAck('mcp', msg).then((r) => this.onmessage?.(r), (e) => this.onerror?.(e));
  }
  async close() { this.s?.close(); }
}

// A fresh SDK Transport of `kind` ('http', 'stdio' or 'socket') for session `S` ({jobId,
// agentToken}) of the server behind `kit` ({srv, wsAddr}).
export function transportFor(kind, kit, S) {
  if (kind === 'http')
    return new StreamableHTTPClientTransport(new URL(kit.srv.url + '/mcp'),
      { requestInit: { headers: { Authorization: 'Bearer ' + S.agentToken } } });
  if (kind === 'stdio')
    return new StdioClientTransport({ command: CTL, args: ['mcp-bridge', '--job', S.jobId], stderr: 'pipe',
      env: { ...process.env, JAILBOX_URL: kit.srv.url, JAILBOX_WS_URL: 'ws://' + kit.wsAddr, JAILBOX_AGENT_TOKEN: S.agentToken } });
  if (kind === 'socket') return new SocketIoTransport('http://' + kit.wsAddr, S.agentToken);
  throw new Error('unknown transport ' + kind);
}

// An SDK Client named `name`, connected (initialize done) over `kind` to session `S`.
export async function connectClient(kind, kit, S, name = 'jailbox-test') {
  const client = new Client({ name, version: '1.0.0' });
  await client.connect(transportFor(kind, kit, S));
  return client;
}
