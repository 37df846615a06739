// verify.js — the audit chain verified in the browser (api/audit.md "Verification"), with
// WebCrypto only: SHA-256 of canonical ‖ prevHash, the keyId of each published key, the
// Ed25519 signature over the hash (RFC 8032 via crypto.subtle), key retirement, seq order,
// session, links, stated fields against the canonical ones, the seal; then the heads the page
// received live (jailbox:audit_head) against the exported chain.
'use strict';

const JBVerify = (() => {
  const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, '0')).join('');
  const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const sha256 = async (bytes) => new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  const ZERO = '0'.repeat(64);
  const HEX64 = /^[0-9a-f]{64}$/;

  // JSON values equal as values (member order free)
  function same(a, b) {
    if (a === b) return true;
    if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
  }

  // `keys`: GET /v1/audit/keys's {keys:[…]}. Returns Map keyId → {key (CryptoKey), retiredAt};
  // a key whose id does not match its public key is left out.
  async function importKeys(keys) {
    const m = new Map();
    for (const k of keys.keys || []) {
      if (k.algorithm !== 'ed25519') continue;
      const raw = b64(k.publicKey);
      if (raw.length !== 32 || hex(await sha256(raw)).slice(0, 16) !== k.keyId) continue;
      const key = await crypto.subtle.importKey('raw', raw, { name: 'Ed25519' }, false, ['verify']);
      m.set(k.keyId, { key, retiredAt: k.retiredAt });
    }
    return m;
  }

  // Verifies the export `text` (JSON Lines) of session `session` against the keys `keys`
  // (importKeys) and the `heads` seen live ([{seq, hash}]), stopping at the first failure.
  // Calls onRow(row, ok) for each line read. Returns {ok, entries, sealed, head, firstBadSeq,
  // reason, detail, headsChecked}.
  async function verify(text, session, keys, heads, onRow = () => {}) {
    const lines = text.split('\n').filter((l) => l.length);
    let prev = ZERO, sealed = false, head = null;
    const res = (ok, p, reason, detail) => ({ ok, entries: ok ? lines.length : p - 1, sealed, head,
      firstBadSeq: ok ? null : p, reason: reason || null, detail: detail || null, headsChecked: 0 });
    const hashes = [];
    for (let i = 0; i < lines.length; i++) {
      const p = i + 1;
      let row, canon, bytes;
      try {
        row = JSON.parse(lines[i]);
        bytes = b64(row.canonical);
        canon = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
        if (!HEX64.test(row.hash) || !HEX64.test(row.prevHash) || typeof row.signature !== 'string')
          throw new Error('bad member');
      } catch (e) {
        onRow(row || { seq: p }, false);
        return res(false, p, 'malformed', String(e.message || e));
      }
      const bad = (reason, detail) => { onRow(row, false); return res(false, p, reason, detail); };
      if (sealed) return bad('entry after seal');
      const prevBytes = Uint8Array.from(row.prevHash.match(/../g), (h) => parseInt(h, 16));
      const buf = new Uint8Array(bytes.length + 32);
      buf.set(bytes, 0);
      buf.set(prevBytes, bytes.length);
      const h = await sha256(buf);
      if (hex(h) !== row.hash) return bad('content changed', 'hash does not match canonical ‖ prevHash');
      const k = keys.get(row.keyId);
      if (!k) return bad('unknown key', row.keyId);
      let sigOk = false;
      try { sigOk = await crypto.subtle.verify({ name: 'Ed25519' }, k.key, b64(row.signature), h); } catch { sigOk = false; }
      if (!sigOk) return bad('bad signature');
      if (k.retiredAt && !(canon.timestamp < k.retiredAt)) return bad('retired key');
      if (canon.seq !== p) return bad(canon.seq < p ? 'reordered' : 'gap', `seq ${canon.seq} at position ${p}`);
      if (canon.session !== session) return bad('wrong session', String(canon.session));
      if (row.prevHash !== prev) return bad('broken link');
      for (const f of ['seq', 'session', 'operation', 'path', 'timestamp', 'details'])
        if (!same(row[f], canon[f])) return bad('content changed', `stated ${f} differs from the signed one`);
      if (canon.operation === 'seal') {
        if (!canon.details || canon.details.entries !== p - 1 || canon.details.head !== row.prevHash)
          return bad('content changed', 'seal does not state the chain before it');
        sealed = true;
      }
      prev = row.hash;
      head = { seq: p, hash: row.hash };
      hashes.push(row.hash);
      onRow(row, true);
    }
    const r = res(true, lines.length + 1);
    for (const hd of heads) {
      if (hd.seq > hashes.length) return { ...r, ok: false, firstBadSeq: hashes.length + 1, reason: 'truncated', detail: `a head seen live was seq ${hd.seq}` };
      if (hashes[hd.seq - 1] !== hd.hash) return { ...r, ok: false, firstBadSeq: hd.seq, reason: 'head mismatch', detail: 'the head seen live had another hash' };
      r.headsChecked++;
    }
    return r;
  }

  return { verify, importKeys };
})();
