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
  kit = await startSandboxServer('jailbox-sandbox:console',
    { JAILBOX_APPROVAL_TIMEOUT: '300', JAILBOX_DIFF_PREVIEW_MAX: '1048576', JAILBOX_WS_MAX_PAYLOAD: '2097152' },
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

  // the contract in sections: each wall up, the checks from inside, the residual risks
  const contract = (await kit.sessionOf(jobId)).walls;
  await page.click('#contract-panel summary');
  for (const wall of Object.keys(contract.walls)) {
    await page.locator('#contract .wall h5').filter({ hasText: wall }).locator('.ok').filter({ hasText: 'up' }).waitFor();
  }
  assert.deepEqual(Object.keys(contract.walls).sort(), ['bwrap', 'docker', 'gvisor']);
  await page.locator('#contract .inside dt').filter({ hasText: /^uid$/ }).waitFor();
  assert.ok(contract.residualRisks.length > 0);
  await page.locator('#contract .risks h4').filter({ hasText: `Residual risks (${contract.residualRisks.length})` }).waitFor();
  assert.equal(await page.locator('#contract .risks > ul > li').count(), contract.residualRisks.length);
  await shot(page, '01b-contract');
  await page.click('#contract-panel summary');

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
  // (the two writes race: either may hold the lower op id and come first)
  const first = page.locator('.card:not(.running)').filter({ has: page.locator('h3', { hasText: evil[0].path }) });
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
  const ex = kit.call(agent, 'exec', { argv: ['/bin/sh', '-c', 'echo started; sleep 120'], env: { LANG: 'C.UTF-8', TZ: 'ghp_' + 'x'.repeat(36) } }, 180000);
  await page.locator('.card:not(.running) .mono').filter({ hasText: '"/bin/sh"' }).waitFor();
  // the variables with their values, a secret-looking one masked
  assert.equal(await page.locator('.card:not(.running) .env').textContent(), 'env: LANG="C.UTF-8" TZ="[REDACTED:github_token]"');
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

  // 6. accept: the page stays on the ended session, read-only (the buyer keeps read access for
  // JAILBOX_BUYER_READ_RETENTION_S), and verifies the sealed chain
  await page.click('#accept');
  await page.waitForFunction(() => document.getElementById('state').textContent === 'accepted');
  await page.locator('#readonly').filter({ hasText: 'ended (accepted): read-only' }).waitFor();
  for (const b of ['pause', 'resume', 'abort', 'accept', 'switch-mode']) assert.equal(await page.locator('#' + b).isDisabled(), true, b);
  assert.equal((await kit.sessionOf(jobId)).state, 'accepted');
  // a control sent anyway (the buttons forced on) gets the server's 409, said plainly
  await page.evaluate(() => { const b = document.getElementById('pause'); b.disabled = false; b.click(); });
  await page.locator('#control-error').filter({ hasText: 'pause: refused, the session has ended (accepted) and is read-only' }).waitFor();
  assert.equal(await page.locator('#pause').isDisabled(), true, 'the 409 put the controls back off');
  await shot(page, '07-accepted-read-only');
  await kit.waitFor('the seal', async () => (await srv.req('GET', `/v1/jailbox/${jobId}/audit/verify`, { token: srv.serviceToken })).json.sealed === true, 20000);
  await page.click('#verify');
  await page.locator('#verdict.ok').filter({ hasText: 'sealed' }).waitFor({ timeout: 30000 });
  const vs = await page.evaluate(() => window.__jb.verdict);
  const sv = await srv.req('GET', `/v1/jailbox/${jobId}/audit/verify`, { token: srv.serviceToken });
  assert.equal(vs.ok, true, JSON.stringify(vs));
  assert.equal(vs.sealed, true, JSON.stringify(vs));
  assert.equal(vs.entries, sv.json.entries, 'the page verified the whole sealed chain');
  assert.ok(vs.entries > v.entries, 'the seal and the accept came after the first verification');
  assert.equal(await page.locator('#audit-body tr').last().locator('td').nth(1).textContent(), 'seal');
  await shot(page, '08-sealed-chain-verified');

  // 7. the export tampered with on its way: one byte of entry 5's signed content flipped
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
  assert.equal(await page.locator('#audit-body tr').count(), 5, 'verification stops at the first bad entry');
  await shot(page, '09-chain-tampered');
  await page.unroute('**/audit');

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
  // the exact origin: another host name (or scheme) on the console's own port is another page
  const { hostname, port } = new URL(srv.url);
  assert.match(await attempt(`http://localhost:${port}`), /only from its own page's origin/);
  assert.match(await attempt(`http://evil.${hostname}.nip.io:${port}`), /only from its own page's origin/);
  assert.match(await attempt(`https://${hostname}:${port}`), /only from its own page's origin/);
  // REST: reads with the cookie alone, changes only with X-Jailbox-Console: 1
  assert.equal((await fetch(`${srv.url}/v1/jailbox/${S.jobId}`, { headers: { cookie } })).status, 200);
  const noHdr = await fetch(`${srv.url}/v1/jailbox/${S.jobId}/abort`, { method: 'POST', headers: { cookie } });
  assert.equal(noHdr.status, 403);
  assert.notEqual((await kit.sessionOf(S.jobId)).state, 'aborted');
  // another session's pages are not this cookie's
  const other = await srv.open();
  assert.equal((await fetch(`${srv.url}/v1/jailbox/${other.jobId}`, { headers: { cookie } })).status, 403);
});

// a page signed in as the buyer of session `S` by a one-time code of its buyer token
async function buyerPage(S) {
  const code = (await srv.req('POST', '/v1/console/codes', { token: S.buyerToken })).json.code;
  const p = await newPage();
  await p.page.goto(srv.url + '/console/#code=' + code);
  await p.page.locator('#conn').filter({ hasText: 'live' }).waitFor();
  return p;
}

test('two browsers decide the same op; a 1 MiB diff stays responsive; side-by-side diffs', { timeout: 300000 }, async () => {
  const ws = 'ws-console-race';
  mkdirSync(join(srv.wsroot, ws), { recursive: true });
  writeFileSync(join(srv.wsroot, ws, 'sbs.txt'), 'a\nb\nc\n');
  const S = await srv.open({ workspace: ws, mode: 'supervised' });
  await kit.waitFor('awaiting_agent', async () => (await kit.sessionOf(S.jobId)).state === 'awaiting_agent', 120000);
  const A = await buyerPage(S), B = await buyerPage(S);
  const agent = await kit.connect(S.agentToken);

  // 1. both pages decide the same write at once: one wins, the other shows the server's word
  const w = kit.call(agent, 'write', { path: 'race.txt', content: 'one\n' });
  const pend = (p) => p.page.locator('.card:not(.running):not(.lost)').first();
  await pend(A).locator('button.approve').waitFor();
  await pend(B).locator('button.reject').waitFor();
  await Promise.all([pend(A).locator('button.approve').evaluate((b) => b.click()),
    pend(B).locator('button.reject').evaluate((b) => b.click())]);
  const wr = await w;
  const lostIn = await kit.waitFor('the losing page', async () => {
    const [a, b] = await Promise.all([A.page.locator('.card.lost').count(), B.page.locator('.card.lost').count()]);
    return a + b === 1 ? (a ? A : B) : null;
  }, 10000);
  const won = lostIn === A ? 'rejected' : 'approved';
  assert.equal(toolFailure(wr) === undefined, won === 'approved', JSON.stringify(wr));
  const op = (await srv.req('GET', `/v1/jailbox/${S.jobId}/ops`, { token: srv.serviceToken })).json.ops
    .find((o) => o.tool === 'write' && o.path === 'race.txt');
  assert.equal(op.decision ?? op.state, won === 'approved' ? 'approved' : 'rejected', JSON.stringify(op));
  const lost = lostIn.page.locator('.card.lost');
  await lost.locator('.error').filter({ hasText: new RegExp(`op ${op.opId} was decided already: ${won} by buyer`) }).waitFor();
  await lost.locator('.final b').filter({ hasText: new RegExp(`^${op.state}$`) }).waitFor();
  await shot(lostIn.page, '11-decided-in-the-other-browser');
  await lost.locator('button').click();
  await lost.waitFor({ state: 'detached' });
  await B.ctx.close();

  // 2. a write of 1 MiB: the request event carries a cut diff; "show the whole diff" fetches it
  // (GET …/ops/:opId/diff), drawn as a window of lines; no task over 1 s, rendered within the bound
  const page = A.page;
  const lines = 16384, big = Array.from({ length: lines }, (_, i) => `line ${String(i).padStart(6, '0')} ${'x'.repeat(51)}`).join('\n') + '\n';
  assert.equal(big.length, 1 << 20);
  const wb = kit.call(agent, 'write', { path: 'big.txt', content: big }, 120000);
  const card = page.locator('.card:not(.lost)').filter({ hasText: 'big.txt' });
  await card.locator('.diff-size').filter({ hasText: /cut: the whole diff is \d+ bytes/ }).waitFor();
  const wholeBytes = Number((await card.locator('.diff-size').textContent()).match(/whole diff is (\d+) bytes/)[1]);
  assert.ok(wholeBytes > big.length, `the whole diff (${wholeBytes}) is longer than the content`);
  const longtasks = await page.evaluate(() => {
    window.__long = [];
    if (!PerformanceObserver.supportedEntryTypes.includes('longtask')) return false;
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({ type: 'longtask' });
    return true;
  });
  const t0 = Date.now();
  const more = card.locator('button.more');
  assert.equal(await more.textContent(), `show the whole diff (${wholeBytes} bytes)`);
  await more.click();
  await card.locator('.diff-size').filter({ hasText: 'the whole diff, of the file as it is now' }).waitFor();
  const renderMs = Date.now() - t0;
  assert.doesNotMatch(await card.locator('.diff-size').textContent(), /cut:/);
  const whole = await page.evaluate(() => [...window.__jb.diffs.values()].find((d) => d.lines.length > 1000));
  assert.equal(whole.bytes, wholeBytes, 'the whole diff, every byte');
  assert.equal(whole.lines.filter((l) => l.startsWith('+') && !l.startsWith('+++')).length, lines);
  const view = card.locator('.diff.windowed');
  assert.ok(await view.locator('.dl').count() <= 40, 'a window of lines in the DOM');
  // the whole diff's last line, scrolled to
  const lastLine = '+' + big.split('\n')[lines - 1];
  assert.equal(whole.lines[whole.lines.length - 2], lastLine);
  await view.evaluate((v) => { v.scrollTop = v.scrollHeight; });
  await view.locator('.dl').filter({ hasText: lastLine }).waitFor();
  assert.ok(await view.locator('.dl').count() <= 40);
  const maxLong = longtasks ? Math.max(0, ...await page.evaluate(() => window.__long)) : null;
  console.log(`1 MiB diff: whole diff fetched and drawn in ${renderMs} ms; longest task ${maxLong} ms`);
  assert.ok(renderMs < 5000, `drawn in ${renderMs} ms`);
  if (longtasks) assert.ok(maxLong < 1000, `a task of ${maxLong} ms`);
  await shot(page, '12-big-diff');
  await card.locator('button.approve').click();
  assert.equal(toolFailure(await wb), undefined);

  // 3. side by side: the changed line's old and new text in one row; back to inline
  const ws2 = kit.call(agent, 'write', { path: 'sbs.txt', content: 'a\nB\nc\n' });
  const c2 = page.locator('.card:not(.lost)').filter({ hasText: 'sbs.txt' });
  await c2.locator('.diff .dl.del').filter({ hasText: '-b' }).waitFor();
  await page.click('#diff-mode');
  const pair = c2.locator('.diff.side .dl.sbs').filter({ has: page.locator('.del', { hasText: '-b' }) });
  await pair.locator('.add').filter({ hasText: '+B' }).waitFor();
  await c2.locator('.diff.side .dl.sbs .ctx').filter({ hasText: ' a' }).first().waitFor();
  await shot(page, '13-side-by-side');
  await page.click('#diff-mode');
  await c2.locator('.diff:not(.side) .dl.add').filter({ hasText: '+B' }).waitFor();
  await c2.locator('button.approve').click();
  assert.equal(toolFailure(await ws2), undefined);
  assert.deepEqual(await page.evaluate(() => window.__csp), [], 'no CSP violation');
  assert.deepEqual(A.problems.filter((p) => !/Failed to load resource.*409/.test(p)), []);
  await A.ctx.close();
});

test('5,000 ops: the feed keeps a window of rows, scrolls to both ends, and j/k move through it', { timeout: 120000 }, async () => {
  const S = await srv.open();
  // the ops as a fast agent's reads leave them (a fixture: 5,000 sandboxed reads take minutes here)
  await srv.db.query(`INSERT INTO ops (job_id, tool, path, args, state, decision, result, created_at, completed_at)
    SELECT $1, 'read', 'src/f' || g || '.c', '{}', 'done', 'auto', jsonb_build_object('size', g), now(), now()
    FROM generate_series(1, 5000) g`, [S.jobId]);
  const ids = (await srv.db.query('SELECT min(op_id) AS lo, max(op_id) AS hi FROM ops WHERE job_id = $1', [S.jobId])).rows[0];
  const [lo, hi] = [Number(ids.lo), Number(ids.hi)];
  const t0 = Date.now();
  const { ctx, page, problems } = await buyerPage(S);
  await page.waitForFunction(() => window.__jb.ops.size === 5000, null, { timeout: 60000 });
  const feed = page.locator('#feed');
  await feed.locator(`.feed-row[data-op="${hi}"]`).waitFor();
  console.log(`5,000 ops: signed in, loaded and drawn in ${Date.now() - t0} ms`);
  const rows = () => feed.locator('.feed-row').count();
  assert.ok(await rows() <= 40, `${await rows()} rows in the DOM`);
  await feed.evaluate((f) => { f.scrollTop = f.scrollHeight; });
  await feed.locator(`.feed-row[data-op="${lo}"]`).filter({ hasText: 'src/f1.c' }).waitFor();
  assert.ok(await rows() <= 40);
  await shot(page, '14-5000-ops-end');
  // j/k and Home/End with the list focused
  await feed.evaluate((f) => { f.scrollTop = 0; });
  await feed.locator(`.feed-row[data-op="${hi}"]`).click();
  const sel = () => feed.locator('.feed-row.sel').getAttribute('data-op');
  assert.equal(await sel(), String(hi));
  for (let i = 0; i < 3; i++) await page.keyboard.press('j');
  await page.waitForFunction((x) => document.querySelector('#feed .feed-row.sel')?.dataset.op === String(x), hi - 3);
  await page.keyboard.press('k');
  await page.waitForFunction((x) => document.querySelector('#feed .feed-row.sel')?.dataset.op === String(x), hi - 2);
  await page.keyboard.press('End');
  await page.waitForFunction((x) => document.querySelector('#feed .feed-row.sel')?.dataset.op === String(x), lo);
  await page.keyboard.press('k');
  await page.waitForFunction((x) => document.querySelector('#feed .feed-row.sel')?.dataset.op === String(x), lo + 1);
  for (let i = 0; i < 30; i++) await page.keyboard.press('k'); // the selection stays in view
  await page.waitForFunction((x) => document.querySelector('#feed .feed-row.sel')?.dataset.op === String(x), lo + 31);
  assert.ok(await rows() <= 40);
  await shot(page, '15-5000-ops-keys');
  assert.deepEqual(problems, []);
  await ctx.close();
});

test('a service sign-in sees the session list', async () => {
  // a service sign-in has no session: jobId is there, null (api/openapi.yaml ConsoleSignIn)
  const who = await srv.req('GET', '/v1/console/session', { token: srv.serviceToken });
  assert.equal(who.status, 200, who.text);
  assert.deepEqual([who.json.role, 'jobId' in who.json, who.json.jobId], ['service', true, null], who.text);
  const { ctx, page } = await newPage();
  await page.goto(srv.url + '/console/');
  await page.fill('#token', srv.serviceToken);
  await page.click('#signin-form button');
  await page.locator('#list-body a').first().waitFor();
  assert.ok(await page.locator('#list-body td').filter({ hasText: 'accepted' }).count() >= 1);
  await shot(page, '10-service-list');
  await ctx.close();
});
