// text.js — how the console shows a string that came from an agent: always as text (a DOM
// text node, never markup), with every character that could hide or reorder what is shown —
// bidi controls, zero-width characters, C0/C1 controls (terminal escapes start with ESC),
// lone surrogates, and U+FFFD (where the server replaced bytes that were not UTF-8) — written
// out visibly as ⟨U+XXXX⟩ in a marked span.
'use strict';

const JBText = (() => {
  // code points shown as ⟨U+XXXX⟩; `keepNl` keeps newline and tab as they are (diffs, output)
  function hidden(cp, keepNl) {
    if (keepNl && (cp === 0x0a || cp === 0x09)) return false;
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return true;
    if (cp === 0x061c || cp === 0x200e || cp === 0x200f) return true; // marks
    if (cp >= 0x202a && cp <= 0x202e) return true; // embeddings, overrides
    if (cp >= 0x2066 && cp <= 0x2069) return true; // isolates
    if ((cp >= 0x200b && cp <= 0x200d) || cp === 0x2060 || cp === 0xfeff) return true; // zero-width
    if (cp >= 0xd800 && cp <= 0xdfff) return true; // a lone surrogate
    if (cp === 0xfffd || cp === 0x00ad || (cp >= 0xfff9 && cp <= 0xfffb)) return true;
    return false;
  }
  const label = (cp) => '⟨U+' + cp.toString(16).toUpperCase().padStart(4, '0') + '⟩';

  // Appends `s` (any value; non-strings are String()ed) to element `el` as text nodes, the
  // hidden characters as <span class="ctrl">⟨U+XXXX⟩</span>. Returns `el`.
  function put(el, s, keepNl = false) {
    s = s === null || s === undefined ? '' : String(s);
    let run = '';
    for (let i = 0; i < s.length; i++) {
      let cp = s.charCodeAt(i);
      if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < s.length) {
        const lo = s.charCodeAt(i + 1);
        if (lo >= 0xdc00 && lo <= 0xdfff) { run += s[i] + s[i + 1]; i++; continue; }
      }
      if (hidden(cp, keepNl)) {
        if (run) el.appendChild(document.createTextNode(run));
        run = '';
        const sp = document.createElement('span');
        sp.className = 'ctrl';
        sp.textContent = label(cp);
        el.appendChild(sp);
      } else {
        run += s[i];
      }
    }
    if (run) el.appendChild(document.createTextNode(run));
    return el;
  }

  // A new element `tag` (class `cls`) holding `s` as text.
  function el(tag, s, cls, keepNl) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (s !== undefined) put(e, s, keepNl);
    return e;
  }

  // The plain string form with hidden characters as ⟨U+XXXX⟩ (for titles and prompts).
  function visible(s, keepNl = false) {
    s = s === null || s === undefined ? '' : String(s);
    let out = '';
    for (const ch of s) {
      const cp = ch.codePointAt(0);
      out += hidden(cp, keepNl) ? label(cp) : ch;
    }
    return out;
  }

  return { put, el, visible };
})();
