// scrape.mjs — the time of one GET /metrics against the number of op rows: a jailboxd (no
// worker) on a fresh embedded PostgreSQL, ROWS op rows inserted in one session (default
// 100,000: writes done, stats done, a few pending and rejected, every one decided), then
// SCRAPES scrapes timed (default 30), p50 and p95 printed. Run it with JAILBOXD pointing at
// the build to measure (the scrape of a build before migration 030 counted every op row).
//   JAILBOXD=build/jailboxd node bench/metrics/scrape.mjs [ROWS] [SCRAPES]
// Uses tests/node's packages (npm ci there first).
import { startServer } from '../../tests/node/lib/server.mjs';

const ROWS = Number(process.argv[2] ?? 100000);
const SCRAPES = Number(process.argv[3] ?? 30);

const srv = await startServer();
try {
  const s = await srv.open();
  await srv.setState(s.jobId, 'active');
  const t0 = Date.now();
  for (let done = 0; done < ROWS; done += 10000) {
    const n = Math.min(10000, ROWS - done);
    await srv.db.query(
      `INSERT INTO ops (job_id, tool, path, args, state, decision, decided_at, created_at)
       SELECT $1, CASE WHEN i % 3 = 0 THEN 'stat' ELSE 'write' END, 'f' || i,
              jsonb_build_object('size', 6, 'sha256', repeat('a', 64)),
              CASE WHEN i % 1000 = 1 THEN 'pending' WHEN i % 1000 = 2 THEN 'rejected' ELSE 'done' END,
              CASE WHEN i % 1000 = 1 THEN NULL WHEN i % 1000 = 2 THEN 'rejected' ELSE 'auto' END,
              CASE WHEN i % 1000 = 1 THEN NULL ELSE now() END, now() - interval '2 s'
         FROM generate_series(1, $2::int) i`, [s.jobId, n]);
  }
  await srv.db.query('VACUUM ANALYZE ops');
  const insertMs = Date.now() - t0;
  const times = [];
  let body = '';
  for (let i = 0; i < SCRAPES; i++) {
    const t = process.hrtime.bigint();
    const r = await srv.req('GET', '/metrics', { token: srv.serviceToken });
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (r.status !== 200) throw new Error(`scrape ${r.status} ${r.text}`);
    body = r.text;
  }
  times.sort((a, b) => a - b);
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))].toFixed(2);
  const done = body.match(/jailbox_ops\{tool="write",state="done"\} (\d+)/)?.[1];
  console.log(`${ROWS} op rows (inserted in ${insertMs} ms); ${SCRAPES} scrapes of /metrics:` +
    ` p50 ${q(0.5)} ms, p95 ${q(0.95)} ms; jailbox_ops{write,done} = ${done}`);
} finally {
  await srv.stop();
}
