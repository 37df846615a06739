#!/usr/bin/env python3
"""Tree hash v1 (api/audit.md), the reference implementation: prints the digest of DIR.
Used by tests/unit/lib/test_treehash.c and the node tests to cross-check lib/treehash.c."""
import hashlib, os, stat, sys

TYPES = {stat.S_IFREG: b"f", stat.S_IFDIR: b"d", stat.S_IFLNK: b"l", stat.S_IFIFO: b"p",
         stat.S_IFSOCK: b"s", stat.S_IFCHR: b"c", stat.S_IFBLK: b"b"}

def tree_hash(root):
    records = []
    def walk(d, rel):
        for name in os.listdir(d):  # bytes in, bytes out; never "." or ".."
            full, path = os.path.join(d, name), rel + b"/" + name if rel else name
            st = os.lstat(full)  # never follows a link
            t, value = TYPES[stat.S_IFMT(st.st_mode)], b""
            if t == b"f":
                with open(full, "rb") as f:
                    value = hashlib.file_digest(f, "sha256").hexdigest().encode() \
                        if hasattr(hashlib, "file_digest") else hashlib.sha256(f.read()).hexdigest().encode()
            elif t == b"l":
                value = os.readlink(full)
            records.append((path, b"%s\0%s\0%04o\0%s\n" % (t, path, st.st_mode & 0o7777, value)))
            if t == b"d":
                walk(full, path)
    walk(os.fsencode(root), b"")
    return hashlib.sha256(b"".join(r for _, r in sorted(records))).hexdigest()

if __name__ == "__main__":
    print(tree_hash(sys.argv[1]))
