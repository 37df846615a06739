// console.test.mjs — the buyer's web console in headless Chromium (Debian's chromium driven
// by playwright-core): a one-time link printed by `jailboxctl open --console` signs the page
// in (the code leaves the URL; the token never enters it), a scripted agent writes and runs
// commands while the page approves one write with allow-similar (the next write in that
// directory runs unasked), rejects one with a reason, approves an exec with the `a` key and
// kills it while it runs, pauses and resumes; the agent's strings (HTML, bidi override,
// zero-width, ANSI escapes) are shown as text and run nothing (no window side effect, no CSP
// violation); the audit chain is verified in the page (green), then the served export is
// tampered with (page.route) and the page names the first bad entry (red); accept.
// Screenshots of each step go to tests/node/artifacts/console/. Needs root, Docker with
// runsc, and /usr/bin/chromium (deploy/install-deps.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startSandboxServer, toolFailure } from './lib/agent.mjs';
import { CTL } from './lib/mcp.mjs';

const ART = join(dirname(fileURLToPath(import.meta.url)), 'artifacts/console');
let kit, srv, browser;

before(async () => {
  mkdirSync(ART, { recursive: true });
  kit = await startSandboxServer('jailbox-sandbox:console', { JAILBOX_APPROVAL_TIMEOUT: '300' },
    [`${realpathSync('/bin/sh')}:/bin/sh`, '/usr/bin/sleep', '/usr/bin/echo']);
  srv = kit.srv;
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
});

after(async () => {
  const asan = srv?.log().match(/ERROR: AddressSanitizer[\s\S]{0,3000}|runtime error:[^\n]*/);
  if (asan) console.log(asan[0]);
  await browser?.close();
  kit?.closeSockets();
  await srv?.stop();
});

// a page that records CSP violations, page errors and console errors
async function newPage() {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  const problems = [];
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  page.on('pageerror', (e) => problems.push('pageerror: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  return { ctx, page, problems };
}

const shot = (page, name) => page.screenshot({ path: join(ART, name + '.png'), fullPage: true });

test('a wrong token gives a clear sign-in error, once', async () => {
  const { ctx, page, problems } = await newPage();
  let signins = 0;
  page.on('request', (r) => { if (r.url().endsWith('/v1/console/session') && r.method() === 'POST') signins++; });
  await page.goto(srv.url + '/console/#code=jbt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
  await page.locator('#signin-error').filter({ hasText: /already used or has expired/ }).waitFor();
  assert.equal(new URL(page.url()).hash, '', 'the code left the URL');
  await page.fill('#token', 'jbt_' + 'A'.repeat(43));
  await page.click('#signin-form button');
  await page.locator('#signin-error').filter({ hasText: /unknown or revoked token/ }).waitFor();
  await page.waitForTimeout(1000);
  assert.equal(signins, 2, 'one sign-in request per attempt, no retries');
  await shot(page, '00-signin-error');
  assert.deepEqual(problems.filter((p) => !/401|Failed to load resource/.test(p)), []);
  await ctx.close();
});

test('the buyer watches, approves, rejects, kills, pauses and verifies the chain in the browser', { timeout: 600000 }, async () => {
  // the session and its link, as the quickstart prints them
  const name = 'ws-console';
  mkdirSync(join(srv.wsroot, name, 'src'), { recursive: true });
  writeFileSync(join(srv.wsroot, name, 'src/a.c'), 'int a = 0;\n');
  mkdirSync(join(srv.wsroot, name, 'x/<script>window.__pwned=1<'), { recursive: true });
  const out = execFileSync(CTL, ['open', '--workspace', name, '--agent', 'agent-1', '--mode', 'supervised', '--console'],
    { env: { ...process.env, JAILBOX_URL: srv.url, JAILBOX_TOKEN: srv.serviceToken }, encoding: 'utf8' });
  const jobId = out.match(/opened (\S+)/)[1];
  const agentToken = out.match(/agent token: (\S+)/)[1];
  const link = out.match(/console \(one-time link, \d+ s\): (\S+)/)[1];
  assert.match(link, /\/console\/#code=jbt_/);
  assert.ok(!link.includes(out.match(/buyer token: (\S+)/)[1]), 'the link carries a code, not the token');
  await kit.waitFor('awaiting_agent', async () => (await kit.sessionOf(jobId)).state === 'awaiting_agent', 120000);

  const { page, problems } = await newPage();
  await page.goto(link);
  await page.locator('#conn').filter({ hasText: 'live' }).waitFor();
  assert.equal(new URL(page.url()).hash, '', 'the code left the URL');
  const cookies = await page.context().cookies();
  const c = cookies.find((x) => x.name === 'jb_console');
  assert.ok(c && c.httpOnly && c.sameSite === 'Strict', JSON.stringify(cookies));
  assert.equal(await page.evaluate(() => document.cookie), '', 'the page cannot read its sign-in');
  await page.locator('#state').filter({ hasText: 'awaiting_agent' }).waitFor();
  // the link is good once
  const again = await fetch(srv.url + '/v1/console/session', { method: 'POST',
    headers: { 'X-Jailbox-Console': '1', 'X-Jailbox-Console-Code': link.split('#code=')[1] } });
  assert.equal(again.status, 401);
  await shot(page, '01-signed-in');

  const agent = await kit.connect(agentToken);
  await page.locator('#state').filter({ hasText: 'active' }).waitFor();

  // 1. a write approved with allow-similar (directory): the next src/ write runs unasked
  const w1 = kit.call(agent, 'write', { path: 'src/a.c', content: 'int a = 1;\nint b = 2;\n' });
  const card = page.locator('.card:not(.running)').first();
  await card.locator('.diff .add').filter({ hasText: '+int a = 1;' }).waitFor();
  await card.locator('.diff .del').filter({ hasText: '-int a = 0;' }).waitFor();
  await shot(page, '02-approval-diff');
  await card.locator('select.similar').selectOption('directory');
  await card.locator('button.approve').click();
  assert.equal(toolFailure(await w1), undefined);
  const w2 = await kit.call(agent, 'write', { path: 'src/b.c', content: 'int c;\n' });
  assert.equal(toolFailure(w2), undefined, 'allowed by the rule without asking');

  await page.locator('.feed-row').filter({ hasText: 'src/b.c' }).filter({ hasText: /rule:/ }).waitFor();

  // 2. the agent's hostile strings, shown as text; the first rejected with a reason
  const evil = [
    { path: 'x/<script>window.__pwned=1</script>.c', content: '<script>window.__pwned=1</script>\n<img src=x onerror="window.__pwned=1">\n' },
    { path: 'x/\u202egnp.exe', content: 'bidi \u202e override, zero\u200bwidth, \u001b[31mred\u001b[0m ansi\n' },
  ];
  const pend = evil.map((e) => kit.call(agent, 'write', e));
  await page.locator('.card:not(.running)').nth(1).waitFor();
  await page.locator('.ctrl').filter({ hasText: '⟨U+202E⟩' }).first().waitFor();
  await page.locator('.ctrl').filter({ hasText: '⟨U+001B⟩' }).first().waitFor();
  await page.locator('.ctrl').filter({ hasText: '⟨U+200B⟩' }).first().waitFor();
  assert.ok(await page.locator('.card h3').filter({ hasText: '<script>window.__pwned=1</script>' }).count() >= 1, 'the HTML is shown as text');
  await shot(page, '03-hostile-strings');
  const first = page.locator('.card:not(.running)').first();
  await first.locator('input.reason').fill('no HTML file names, please');
  await first.locator('button.reject').click();
  const f1 = toolFailure(await pend[0]);
  assert.ok(f1, 'rejected');
  const ops = await srv.req('GET', `/v1/jailbox/${jobId}/ops?state=rejected`, { token: srv.serviceToken });
  assert.equal(ops.json.ops.find((o) => o.path === evil[0].path)?.reason, 'no HTML file names, please', JSON.stringify(ops.json));
  // the second with the keyboard: j/k move, r focuses the reason, then r again rejects
  await page.locator('.card:not(.running)').first().locator('h3').filter({ hasText: '⟨U+202E⟩' }).waitFor();
  await page.keyboard.press('k');
  await page.keyboard.press('r');
  await page.keyboard.type('bidi names are refused');
  await page.locator('.card:not(.running)').first().locator('button.reject').click();
  assert.ok(toolFailure(await pend[1]));
  assert.equal(await page.evaluate(() => window.__pwned), undefined);

  // 3. an exec approved with the `a` key, its live output, killed while it runs
  const ex = kit.call(agent, 'exec', { argv: ['/bin/sh', '-c', 'echo started; sleep 120'] }, 180000);
  await page.locator('.card:not(.running) .mono').filter({ hasText: '"/bin/sh"' }).waitFor();
  await page.locator('body').click({ position: { x: 5, y: 5 } });
  await page.keyboard.press('a');
  await page.locator('.card.running .out').filter({ hasText: 'started' }).waitFor({ timeout: 60000 });
  await shot(page, '04-exec-running');
  await page.locator('.card.running button.kill').click();
  const exr = await ex;
  const exf = toolFailure(exr);
  assert.ok(exf && /killed/.test(JSON.stringify(exf)), JSON.stringify(exr));
  await page.locator('.card.running').waitFor({ state: 'detached' });

  // 4. pause and resume
  await page.click('#pause');
  await page.locator('#state').filter({ hasText: 'paused' }).waitFor();
  await shot(page, '05-paused');
  await page.click('#resume');
  await page.locator('#state').filter({ hasText: 'active' }).waitFor();

  // 5. the agent is done; the change summary; the chain verified in the page
  const d = await kit.call(agent, 'done', { summary: 'two files' });
  assert.equal(toolFailure(d), undefined);
  await page.locator('#state').filter({ hasText: /^done$/ }).waitFor();
  await page.click('#changes-reload');
  await page.locator('#changes td').filter({ hasText: 'src/b.c' }).waitFor();
  await page.click('#verify');
  await page.locator('#verdict.ok').waitFor({ timeout: 30000 });
  const v = await page.evaluate(() => window.__jb.verdict);
  assert.equal(v.ok, true, JSON.stringify(v));
  assert.ok(v.entries >= 8 && v.headsChecked >= 3, JSON.stringify(v));
  const server = await srv.req('GET', `/v1/jailbox/${jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(server.json.entries, v.entries, 'the page saw the whole chain');
  await shot(page, '06-chain-verified');

  // 6. the export tampered with on its way: one byte of entry 5's signed content flipped
  await page.route('**/audit', async (route) => {
    const res = await route.fetch();
    const lines = (await res.text()).split('\n');
    const row = JSON.parse(lines[4]);
    const bytes = Buffer.from(row.canonical, 'base64');
    bytes[bytes.indexOf('"operation"') + 13] ^= 0x01;
    row.canonical = bytes.toString('base64');
    lines[4] = JSON.stringify(row);
    await route.fulfill({ response: res, body: lines.join('\n') });
  });
  await page.click('#verify');
  await page.locator('#verdict.bad').filter({ hasText: 'TAMPERED at seq 5: content changed' }).waitFor();
  await page.locator('#audit-body tr.bad').filter({ hasText: /^5/ }).waitFor();
  await shot(page, '07-chain-tampered');
  await page.unroute('**/audit');

  // 7. accept
  // (the buyer's tokens, the console's with them, are revoked when the session ends: the page
  // then asks to sign in again)
  await page.click('#accept');
  await page.waitForFunction(() => document.getElementById('state').textContent === 'accepted');
  await shot(page, '08-accepted');
  assert.equal((await kit.sessionOf(jobId)).state, 'accepted');

  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(await page.evaluate(() => window.__csp), [], 'no CSP violation');
  assert.deepEqual(problems.filter((p) => !/Failed to load resource.*(401|409)/.test(p)), []);
});

test('the console cookie opens a socket only from the console\'s own origin, and changes state only with the console header', async () => {
  const S = await srv.open();
  const code = (await srv.req('POST', '/v1/console/codes', { token: S.buyerToken })).json.code;
  const r = await fetch(srv.url + '/v1/console/session', { method: 'POST', headers: { 'X-Jailbox-Console': '1', 'X-Jailbox-Console-Code': code } });
  assert.equal(r.status, 200);
  const cookie = r.headers.get('set-cookie').split(';')[0];
  const { io } = await import('socket.io-client');
  const attempt = (origin) => new Promise((res) => {
    const s = io('http://' + kit.wsAddr, { transports: ['websocket'], reconnection: false, forceNew: true,
      extraHeaders: { cookie, origin } });
    s.once('connect', () => { s.close(); res('connected'); });
    s.once('connect_error', (e) => { s.close(); res(e.message); });
  });
  assert.equal(await attempt(srv.url), 'connected');
  assert.match(await attempt('http://127.0.0.1:1'), /only from its own page's origin/);
  // REST: reads with the cookie alone, changes only with X-Jailbox-Console: 1
  assert.equal((await fetch(`${srv.url}/v1/jailbox/${S.jobId}`, { headers: { cookie } })).status, 200);
  const noHdr = await fetch(`${srv.url}/v1/jailbox/${S.jobId}/abort`, { method: 'POST', headers: { cookie } });
  assert.equal(noHdr.status, 403);
  assert.notEqual((await kit.sessionOf(S.jobId)).state, 'aborted');
  // another session's pages are not this cookie's
  const other = await srv.open();
  assert.equal((await fetch(`${srv.url}/v1/jailbox/${other.jobId}`, { headers: { cookie } })).status, 403);
});

test('a service sign-in sees the session list', async () => {
  const { ctx, page } = await newPage();
  await page.goto(srv.url + '/console/');
  await page.fill('#token', srv.serviceToken);
  await page.click('#signin-form button');
  await page.locator('#list-body a').first().waitFor();
  assert.ok(await page.locator('#list-body td').filter({ hasText: 'accepted' }).count() >= 1);
  await shot(page, '09-service-list');
  await ctx.close();
});
