// bench/escape — how fast a session ends, p50/p95 over N sessions (default 10), beside
// the floor measured in the same run: a raw force-remove (DELETE /containers/{id}?force=1) of
// a running runsc container of the same image, started straight through the Docker API.
//   escape → alert : an agent's `..` read (jailboxd's check) to the buyer's
//                     jailbox:security_alert, which comes only once the container is gone and
//                     the chain sealed (target: within 1 s)
//   abort → gone   : the buyer's POST …/abort to `docker ps -a` listing no container of the
//                     session (polled every 5 ms; target: within 2 s)
// Usage: node bench/escape/bench.mjs [N]   (root, dockerd with runsc, a built tree; JAILBOXD
// picks the build, default build/jailboxd)
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startJail, openSession, connect, waitEvent, waitState, call, containersOf, docker, closeAll } from '../../tests/node/lib/jail.mjs';

const N = Number(process.argv[2] || 10);
const IMAGE = 'jailbox-sandbox:bench-escape';
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const fmt = (a) => `p50 ${pct(a, 0.5)} ms, p95 ${pct(a, 0.95)} ms`;

const srv = await startJail({ image: IMAGE, shim: 'jailbox-shim' });
const escape = [], abort = [], raw = [];
try {
  for (let i = 0; i < N; i++) {
    // escape → alert
    const s = await openSession(srv, (d) => writeFileSync(join(d, 'a.txt'), 'x\n'), { mode: 'unsupervised' });
    const buyer = await connect(srv, s.buyerToken);
    const agent = await connect(srv, s.agentToken);
    await waitState(srv, s.jobId, ['active']);
    let t0 = Date.now();
    call(agent, 'read', { path: '../etc/passwd' }).catch(() => {});
    await waitEvent(buyer, 'jailbox:security_alert', (p) => p.escape, 10000);
    escape.push(Date.now() - t0);

    // abort → container gone
    const a = await openSession(srv, () => {});
    t0 = Date.now();
    const r = await srv.req('POST', `/v1/jailbox/${a.jobId}/abort`, { token: a.buyerToken });
    if (r.status !== 200) throw new Error(r.text);
    while ((await containersOf(a.jobId)).length) await new Promise((res) => setTimeout(res, 5));
    abort.push(Date.now() - t0);

    // the floor: force-remove a running runsc container of the same image
    const c = await docker('POST', '/containers/create', { Image: IMAGE, Cmd: ['/opt/jailbox/bin/jailbox-shim', '--launch'],
      OpenStdin: true, StdinOnce: true, HostConfig: { Runtime: 'runsc', NetworkMode: 'none' }, Labels: { 'jailbox.bench': '1' } });
    if (c.status !== 201) throw new Error(JSON.stringify(c.json));
    await docker('POST', `/containers/${c.json.Id}/start`);
    t0 = Date.now();
    await docker('DELETE', `/containers/${c.json.Id}?force=1`);
    raw.push(Date.now() - t0);
  }
} finally {
  await closeAll(srv);
  await srv.stop();
}
console.log(`escape → alert (container gone, chain sealed): ${fmt(escape)}  [target ≤ 1000 ms]`);
console.log(`buyer abort → container gone:                 ${fmt(abort)}  [target ≤ 2000 ms]`);
console.log(`raw force-remove of a running runsc container: ${fmt(raw)}`);
console.log(`ratio p50 abort→gone / raw force-remove: ${(pct(abort, 0.5) / pct(raw, 0.5)).toFixed(2)}x; escape→alert / raw: ${(pct(escape, 0.5) / pct(raw, 0.5)).toFixed(2)}x`);
