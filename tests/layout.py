#!/usr/bin/env python3
"""layout.py — the rules that keep each folder's inside in shape, checked on the C sources of
lib/ db/ server/ api/ sandbox/ cli/ (tests/ and bench/ are not checked). Run by tests/layout.sh;
see its header for the rules, the exceptions file and --regen.

After Tor's scripts/maint/practracker/ (function and file sizes, an exceptions file that may only
shrink) and its includes.py (each folder's allowed includes, a toposort to find circles), written
for this tree. Python 3 standard library only.

The C is read lightly, not compiled: comments, string and character literals and preprocessor
lines are blanked (line numbers kept), then the top level is cut at braces and semicolons. A
function definition is a top-level `header { body }` whose header ends in `)` and holds no `=`;
its name is the first identifier before a `(` that is not a C keyword. A prototype is a
top-level declaration in a .h that holds a `(`, is no typedef, and is neither static nor inline.
"""

import argparse
import os
import pickle
import re
import sys

FOLDERS = ["lib", "db", "server", "api", "sandbox", "cli"]
EXCEPTIONS = "tests/layout-exceptions.txt"
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 100

# ---------------------------------------------------------------------------------------------
# The include table: the folder of the including file -> the folders whose headers it may
# include (an include is "folder/name.h" from the tree's root). No exceptions file: a file
# that breaks it fails.
DOORS = ["api/rest", "api/socket", "api/mcp"]
HTTP_DOORS = ["api/rest", "api/mcp"]
BELOW_API = ["lib", "db", "sandbox/proto", "server"]
ALLOWED = {
    "lib": ["lib"],
    "db": ["lib", "db"],
    "sandbox/proto": ["lib", "sandbox/proto"],
    "sandbox/shim": ["lib", "sandbox/proto", "sandbox/shim"],
    "sandbox/worker": ["lib", "db", "sandbox/proto", "sandbox/worker"],
    # jailboxd's runtime: no session semantics, never anything of api/.
    "server": ["lib", "db", "sandbox/proto", "server"],
    # What jailboxd decides: no door, no top-level api/ header.
    "api/core": BELOW_API + ["api/core"],
    # What the HTTP doors share (no door itself): the core and itself.
    "api/http": BELOW_API + ["api/core", "api/http"],
    # The doors: the core and themselves, never another door; the HTTP doors also api/http.
    **{door: BELOW_API + ["api/core", door] + (["api/http"] if door in HTTP_DOORS else [])
       for door in DOORS},
    # The top of api/ (api/main.c, jailboxd's one composition root): everything under api/.
    "api": BELOW_API + ["api", "api/core", "api/http"] + DOORS,
    "cli": ["lib", "db", "sandbox/proto", "cli"],
}
# Headers a folder may not include although their folder is allowed: the core sees no HTTP
# or WebSocket type.
DENIED = {
    "api/core": [
        "server/http.h", "server/ws.h", "server/ws_frame.h", "server/ws_private.h",
        "server/sio_packet.h",
    ],
}
# Folders where no circle may be listed in the exceptions file: api/ has none.
NO_CIRCLE = ["api", "api/core", "api/http"] + DOORS


C_KEYWORDS = set("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary
_Noreturn _Static_assert _Thread_local __attribute__ __typeof__ typeof __extension__ asm __asm__
""".split())

STRIP_RE = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)
PREPROC_RE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]*)"', re.M)
MACRO_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(", re.M)
IDENT_RE = re.compile(r"[A-Za-z_]\w*")
CALLISH_RE = re.compile(r"([A-Za-z_]\w*)\s*\(")


def blank(m):
    """The match replaced by as many newlines as it held (line numbers kept)."""
    return " " + "\n" * m.group(0).count("\n")


def strip_attributes(s):
    """`s` without its __attribute__((...)) groups."""
    out, i = [], 0
    while True:
        j = s.find("__attribute__", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j])
        k = s.find("(", j)
        if k < 0:
            return "".join(out)
        depth = 0
        while k < len(s):
            depth += {"(": 1, ")": -1}.get(s[k], 0)
            k += 1
            if depth == 0:
                break
        i = k


def first_name(header):
    """The first identifier before a `(` that is not a keyword, or None."""
    for m in CALLISH_RE.finditer(header):
        if m.group(1) not in C_KEYWORDS:
            return m.group(1)
    return None


class Source:
    """One .c or .h file, read lightly."""

    def __init__(self, root, path):
        self.path = path
        self.folder = os.path.dirname(path)
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        self.lines = raw.count("\n") + (0 if raw.endswith("\n") or not raw else 1)
        self.includes = [(n, m.group(1)) for n, text in enumerate(raw.split("\n"), 1)
                         for m in [INCLUDE_RE.match(text)] if m]
        self.macros = set(MACRO_RE.findall(raw))
        nocomment = STRIP_RE.sub(blank, raw)
        self.idents = set(IDENT_RE.findall(nocomment))  # macros' bodies count as uses
        self.functions = []  # (name, static, first line of `{`, line of `}`)
        self.prototypes = []  # (name, line)
        self.problem = None
        self._scan(PREPROC_RE.sub(blank, nocomment))

    def _scan(self, code):
        depth, start, line, last = 0, 0, 1, 0
        open_line = header = None
        for m in re.finditer(r"[{};]", code):
            ch, at = m.group(0), m.start()
            line += code.count("\n", last, at)
            last = at
            if ch == "{":
                if depth == 0:
                    header, open_line = code[start:at], line
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth < 0:
                    self.problem = "line %d: a `}` closes nothing" % line
                    return
                if depth == 0:
                    self._body(header, open_line, line)
                    start = at + 1  # what follows up to a `;` (`} name;`) is read as text
            elif depth == 0:  # ';'
                self._declaration(code[start:at], line)
                start = at + 1
        if depth != 0:
            self.problem = "the braces do not balance (%d left open)" % depth

    def _body(self, header, open_line, close_line):
        h = strip_attributes(header).strip()
        if not h.endswith(")") or "=" in h:
            return
        name = first_name(h)
        if name:
            static = re.search(r"\bstatic\b", h) is not None
            self.functions.append((name, static, open_line, close_line))

    def _declaration(self, text, line):
        if not self.path.endswith(".h"):
            return
        h = strip_attributes(text).strip()
        if "(" not in h or re.match(r"typedef\b", h) or re.search(r"\b(static|inline)\b", h):
            return
        name = first_name(h)
        if name:
            at = text.find(name)  # the line the name is on, for the message
            self.prototypes.append((name, line - text.count("\n", max(at, 0))))


def read_tree(root, cache=None):
    """Every .c and .h under the checked folders (dot-files skipped), as Sources. With `cache`
    (a file name; tests/layout_selftest.sh sets LAYOUT_CACHE), a file whose size and mtime
    have not changed since the last run is not read again."""
    old, out = {}, []
    if cache:
        try:
            with open(cache, "rb") as f:
                old = pickle.load(f)
        except Exception:  # no cache yet, or one this version cannot read
            old = {}
    new = {}
    for top in FOLDERS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fn in sorted(files):
                if fn.endswith((".c", ".h")) and not fn.startswith((".", "#")):
                    path = os.path.relpath(os.path.join(dirpath, fn), root)
                    st = os.stat(os.path.join(dirpath, fn))
                    key = (path, st.st_size, st.st_mtime_ns)
                    src = old.get(key) or Source(root, path)
                    new[key] = src
                    out.append(src)
    if cache:
        with open(cache + ".tmp", "wb") as f:
            pickle.dump(new, f)
        os.replace(cache + ".tmp", cache)
    return out


# ---------------------------------------------------------------------------------------------
# Rule 1: includes


def check_includes(sources):
    errors = []
    for s in sources:
        allowed = ALLOWED.get(s.folder)
        if allowed is None:
            errors.append("%s is in no known folder (tests/layout.py ALLOWED)" % s.path)
            continue
        for line, inc in s.includes:
            idir = os.path.dirname(inc)
            if idir not in allowed:
                errors.append("%s:%d includes %s (%s may include: %s)"
                              % (s.path, line, inc, s.folder, " ".join(allowed)))
            elif inc in DENIED.get(s.folder, []):
                errors.append("%s:%d includes %s (%s may not include: %s)"
                              % (s.path, line, inc, s.folder,
                                 " ".join(DENIED[s.folder])))
    return errors


# ---------------------------------------------------------------------------------------------
# Rule 2: a prototype declared in a folder's header is defined in that folder


def check_declarations(sources):
    """Each prototype of a .h is defined (non-static) in a .c of the header's folder. One
    defined in a .c of another folder fails. One defined nowhere fails too: a declaration
    without a definition is dead (or a typo) and would let a call compile that cannot link."""
    macros = set().union(*(s.macros for s in sources))
    defined = {}  # name -> [files]
    for s in sources:
        if s.path.endswith(".c"):
            for name, static, _, _ in s.functions:
                if not static:
                    defined.setdefault(name, []).append(s.path)
    errors = []
    for s in sources:
        for name, line in s.prototypes:
            if name in macros:
                continue
            where = defined.get(name, [])
            if any(os.path.dirname(w) == s.folder for w in where):
                continue
            if where:
                errors.append("%s:%d declares %s(), defined in %s: a header's prototypes are "
                              "defined in its own folder (%s/)"
                              % (s.path, line, name, ", ".join(where), s.folder))
            else:
                errors.append("%s:%d declares %s(), defined nowhere: remove the declaration"
                              % (s.path, line, name))
    return errors


# ---------------------------------------------------------------------------------------------
# Rule 3: no circle between the .c files of one folder


def call_graph(sources):
    """folder -> {file: {file it calls: [function names]}}: A -> B when A names a non-static
    function defined in B, both .c files of the same folder."""
    graphs = {}
    by_folder = {}
    for s in sources:
        if s.path.endswith(".c"):
            by_folder.setdefault(s.folder, []).append(s)
    for folder, files in by_folder.items():
        owner = {}
        for s in files:
            for name, static, _, _ in s.functions:
                if not static and name != "main":
                    owner.setdefault(name, s)
        g = {}
        for a in files:
            own = {f[0] for f in a.functions}
            edges = {}
            for name in sorted(a.idents & owner.keys()):
                b = owner[name]
                if b is not a and name not in own:
                    edges.setdefault(os.path.basename(b.path), []).append(name)
            g[os.path.basename(a.path)] = edges
        graphs[folder] = g
    return graphs


def circles(graph):
    """The strongly connected components of more than one file (Tarjan), each sorted."""
    index, low, onstack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        onstack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in onstack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def all_circles(sources):
    """[(folder, (files...))] of the tree, with the edges inside each for messages."""
    out = []
    for folder, g in sorted(call_graph(sources).items()):
        for comp in circles(g):
            inside = ["%s -> %s (%s)" % (a, b, ", ".join(g[a][b][:3]))
                      for a in comp for b in sorted(g[a]) if b in comp]
            out.append((folder, comp, inside))
    return out


def check_circles(found, listed):
    errors, notes = [], []
    listed_set = set(listed)
    for folder, comp, inside in found:
        if (folder, comp) in listed_set:
            continue
        wider = [c for f, c in listed if f == folder and set(comp) < set(c)]
        if wider:
            continue  # reported below as a listed circle that shrank
        errors.append("new circle in %s/: %s — the calls: %s"
                      % (folder, " ".join(comp), "; ".join(inside)))
    for folder, comp in listed:
        if folder in NO_CIRCLE:
            errors.append("circle %s: %s: %s/ may have no circle, listed or not"
                          % (folder, " ".join(comp), folder))
    present = {(f, c) for f, c, _ in found}
    for folder, comp in listed:
        if (folder, comp) in present:
            continue
        inner = [c for f, c, _ in found if f == folder and set(c) < set(comp)]
        line = "circle %s: %s" % (folder, " ".join(comp))
        if inner:
            errors.append("%s: the circle shrank to %s — write that in its place in %s (or run "
                          "tests/layout.sh --regen)"
                          % (line, " / ".join(" ".join(c) for c in inner), EXCEPTIONS))
        else:
            errors.append("%s: the circle is gone — remove the line from %s (or run "
                          "tests/layout.sh --regen)" % (line, EXCEPTIONS))
    return errors, notes


# ---------------------------------------------------------------------------------------------
# Rule 4: sizes


# Where the process environment may be written: in these functions only, which run before
# any thread starts (or in a process that runs no other thread). getenv elsewhere -- libpq's
# connect reads PG* variables -- races with setenv, which may move `environ` under it.
ENV_WRITERS = {("api/main.c", "settings"), ("sandbox/shim/exec_helper.c", "jb_exec_helper")}
ENV_WRITE_RE = re.compile(r"\b(setenv|putenv|unsetenv|clearenv)\s*\(")


def check_env_writes(sources, root):
    """A call that writes the environment outside ENV_WRITERS, as error lines."""
    out = []
    for s in sources:
        if not s.path.endswith(".c"):
            continue
        with open(os.path.join(root, s.path), encoding="utf-8", errors="replace") as f:
            code = PREPROC_RE.sub(blank, STRIP_RE.sub(blank, f.read()))
        for m in ENV_WRITE_RE.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            inside = [n for n, _, a, b in s.functions if a <= line <= b]
            if inside and (s.path, inside[0]) in ENV_WRITERS:
                continue
            out.append("%s:%d calls %s outside main's start (%s): threads may be running, and "
                       "getenv in them races with it; set the environment before any thread "
                       "starts (tests/layout.py ENV_WRITERS)"
                       % (s.path, line, m.group(1), inside[0] if inside else "no function"))
    return out


def sizes(sources):
    """{("file-size", path) | ("function-size", "path:name"): lines} over the limits."""
    out = {}
    for s in sources:
        if s.lines > MAX_FILE_LINES:
            out[("file-size", s.path)] = s.lines
        for name, _, first, last in s.functions:
            n = last - first + 1
            key = ("function-size", "%s:%s" % (s.path, name))
            if n > MAX_FUNCTION_LINES and n > out.get(key, 0):
                out[key] = n
    return out


def all_sizes(sources):
    """Every file's and function's size (for stale exceptions' messages)."""
    out = {}
    for s in sources:
        out[("file-size", s.path)] = s.lines
        for name, _, first, last in s.functions:
            key = ("function-size", "%s:%s" % (s.path, name))
            out[key] = max(out.get(key, 0), last - first + 1)
    return out


def check_sizes(sources, listed):
    errors, notes = [], []
    over = sizes(sources)
    every = all_sizes(sources)
    limit = {"file-size": MAX_FILE_LINES, "function-size": MAX_FUNCTION_LINES}
    what = {"file-size": "file", "function-size": "function"}
    for key, n in sorted(over.items()):
        kind, where = key
        if key not in listed:
            errors.append("%s %s %d: the %s is %d lines, over %d (split it)"
                          % (kind, where, n, what[kind], n, limit[kind]))
        elif n > listed[key]:
            errors.append("%s %s %d: the %s grew from %d to %d lines; a listed one may shrink, "
                          "never grow" % (kind, where, n, what[kind], listed[key], n))
        elif n < listed[key]:
            notes.append("%s %s %d: down from %d — you may write %d in %s"
                         % (kind, where, n, listed[key], n, EXCEPTIONS))
    for key, was in sorted(listed.items()):
        if key in over:
            continue
        kind, where = key
        if key in every:
            errors.append("%s %s %d: now %d lines, within %d — remove the line from %s"
                          % (kind, where, was, every[key], limit[kind], EXCEPTIONS))
        else:
            errors.append("%s %s %d: no such %s any more — remove the line from %s"
                          % (kind, where, was, what[kind], EXCEPTIONS))
    return errors, notes


# ---------------------------------------------------------------------------------------------
# The exceptions file

HEADER = """\
# tests/layout-exceptions.txt — what the tree breaks today of tests/layout.sh's rules, to be
# paid down: it may only shrink. Written by `tests/layout.sh --regen`; edit by hand to remove
# a line when its debt is paid (the check says which). Lines:
#   circle FOLDER: A.c B.c ...          .c files of FOLDER that call each other round
#   file-size PATH LINES                 a file over %d lines (may shrink, never grow)
#   function-size PATH:FUNCTION LINES    a function over %d lines, `{` to `}` (same)
""" % (MAX_FILE_LINES, MAX_FUNCTION_LINES)


def read_exceptions(path):
    circles_, sizes_, errors = [], {}, []
    if not os.path.exists(path):
        return circles_, sizes_, errors
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"circle (\S+): (.+)$", line)
            if m:
                circles_.append((m.group(1), tuple(sorted(m.group(2).split()))))
                continue
            m = re.match(r"(file-size|function-size) (\S+) (\d+)$", line)
            if m:
                sizes_[(m.group(1), m.group(2))] = int(m.group(3))
                continue
            errors.append("%s:%d: not understood: %s" % (EXCEPTIONS, n, line))
    return circles_, sizes_, errors


def write_exceptions(path, found, over):
    with open(path, "w", encoding="utf-8") as f:
        f.write(HEADER)
        f.write("\n")
        for folder, comp, _ in found:
            f.write("circle %s: %s\n" % (folder, " ".join(comp)))
        f.write("\n")
        for (kind, where), n in sorted(over.items()):
            if kind == "file-size":
                f.write("%s %s %d\n" % (kind, where, n))
        f.write("\n")
        for (kind, where), n in sorted(over.items()):
            if kind == "function-size":
                f.write("%s %s %d\n" % (kind, where, n))


def main(argv):
    ap = argparse.ArgumentParser(description="tests/layout.sh's rules (see its header)")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--regen", action="store_true",
                    help="write %s from the tree, then check" % EXCEPTIONS)
    ap.add_argument("--list", action="store_true",
                    help="print the circles and the offenders, with the calls inside circles")
    args = ap.parse_args(argv)
    root = os.path.normpath(args.root)
    sources = read_tree(root, os.environ.get("LAYOUT_CACHE"))
    exc_path = os.path.join(root, EXCEPTIONS)

    errors = ["%s: cannot read it: %s" % (s.path, s.problem) for s in sources if s.problem]
    found = all_circles(sources)
    if args.regen:
        write_exceptions(exc_path, found, sizes(sources))
        print("layout: wrote %s" % EXCEPTIONS)
    if args.list:
        for folder, comp, inside in found:
            print("circle %s: %s\n    %s" % (folder, " ".join(comp), "\n    ".join(inside)))
        for (kind, where), n in sorted(sizes(sources).items()):
            print("%s %s %d" % (kind, where, n))
    listed_circles, listed_sizes, bad = read_exceptions(exc_path)
    errors += bad
    errors += check_includes(sources)
    errors += check_declarations(sources)
    errors += check_env_writes(sources, root)
    e, notes = check_circles(found, listed_circles)
    errors += e
    e, n = check_sizes(sources, listed_sizes)
    errors += e
    notes += n
    for n in notes:
        print("layout: note: %s" % n)
    for e in errors:
        print("layout: %s" % e)
    if errors:
        return 1
    print("layout: %d files: includes follow the folder table, every header's prototypes are "
          "defined in its folder, circles and sizes within %s (%d circles, %d offenders listed)"
          % (len(sources), EXCEPTIONS, len(listed_circles), len(listed_sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
