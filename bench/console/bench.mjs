// bench.mjs — bench/console/run.sh: a supervised session watched by the web console in
// headless Chromium and by a plain socket.io-client buyer socket in Node at once. The agent
// writes ROUNDS files one after the other; for each approval request the bench takes the
// moment the Node socket received it and the moment the page had painted its diff (the page's
// `jb-diff-painted-<op>` performance mark: a frame after the event was rendered), both on the
// machine's wall clock (performance.timeOrigin + now), measured from the moment the agent's
// write was sent. The op is then approved over REST. Prints p50/p90 of each and of the
// difference (page − Node), per request.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from '../../tests/node/node_modules/playwright-core/index.mjs';
import { startSandboxServer } from '../../tests/node/lib/agent.mjs';

const rounds = Number(process.argv[2] ?? 50);
const now = () => performance.timeOrigin + performance.now();
const K = await startSandboxServer('jailbox-sandbox:bench-console', { JAILBOX_APPROVAL_TIMEOUT: '300' });
const srv = K.srv;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  mkdirSync(join(srv.wsroot, 'bench'), { recursive: true });
  writeFileSync(join(srv.wsroot, 'bench/a.c'), 'int a;\n');
  const out = execFileSync(process.env.JAILBOXCTL, ['open', '--workspace', 'bench', '--agent', 'agent-1', '--mode', 'supervised', '--console'],
    { env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: srv.serviceToken }, encoding: 'utf8' });
  const jobId = out.match(/opened (\S+)/)[1];
  const buyerToken = out.match(/buyer token: (\S+)/)[1];
  const agentToken = out.match(/agent token: (\S+)/)[1];
  const link = out.match(/console \(one-time link, \d+ s\): (\S+)/)[1];
  await K.waitFor('awaiting_agent', async () => (await K.sessionOf(jobId)).state === 'awaiting_agent', 120000);
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  await page.goto(link);
  await page.locator('#conn').filter({ hasText: 'live' }).waitFor();
  const buyer = await K.connect(buyerToken);
  const gotNode = new Map();
  buyer.on('jailbox:approval_request', (ev) => gotNode.set(ev.opId, now()));
  const agent = await K.connect(agentToken);
  const nodeMs = [], pageMs = [], gap = [], recv = [], paint = [];
  const content = Array.from({ length: 40 }, (_, i) => `int line${i} = ${i};\n`).join('');
  for (let i = 0; i < rounds; i++) {
    const t0 = now();
    const w = K.call(agent, 'write', { path: `f${i}.c`, content });
    const opId = await K.waitFor('approval request', () => [...gotNode.keys()].find((k) => !K[k]), 60000);
    K[opId] = true;
    const p = await K.waitFor('painted', () => page.evaluate((id) => window.__jb.painted.get(id) || null, opId), 60000);
    nodeMs.push(gotNode.get(opId) - t0);
    pageMs.push(p.painted - t0);
    gap.push(p.painted - gotNode.get(opId));
    recv.push(p.got - gotNode.get(opId));
    paint.push(p.painted - p.got);
    const r = await srv.req('POST', `/v1/jailbox/${jobId}/approve/${opId}`, { token: buyerToken, body: {} });
    if (r.status !== 200) throw new Error('approve: ' + r.text);
    const res = await w;
    if (!res.result || res.result.isError) throw new Error('write: ' + JSON.stringify(res).slice(0, 300));
  }
  const q = (a, f) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(f * s.length))].toFixed(1); };
  console.log(`approval requests: ${rounds} (a 40-line new file's diff each)`);
  console.log(`write sent → Node socket.io-client got it:  p50 ${q(nodeMs, 0.5)} ms  p90 ${q(nodeMs, 0.9)} ms`);
  console.log(`write sent → console painted the diff:       p50 ${q(pageMs, 0.5)} ms  p90 ${q(pageMs, 0.9)} ms`);
  console.log(`console painted − Node got (same request):    p50 ${q(gap, 0.5)} ms  p90 ${q(gap, 0.9)} ms`);
  console.log(`  of it: page received − Node received          p50 ${q(recv, 0.5)} ms  p90 ${q(recv, 0.9)} ms`);
  console.log(`         page received → painted                p50 ${q(paint, 0.5)} ms  p90 ${q(paint, 0.9)} ms`);
} finally {
  await browser.close();
  K.closeSockets();
  await srv.stop();
}
