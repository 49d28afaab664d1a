#!/usr/bin/env python3
"""Lines of code per Rust file, and the rule for long files.

A line of code is a line of a `.rs` file under src/ or crates/*/src that is
not blank, not only a comment (`//`, `//!`, `///`, or inside `/* */`), and
not inside a unit-test module (`#[cfg(test)] mod … { … }`, or a file that
is itself one, such as engine/tests.rs declared under `#[cfg(test)]`).

The rule (docs/ARCHITECTURE.md, "Long files"): a file with more than
LIMIT lines of code is named in docs/ARCHITECTURE.md with the reason it is
one piece. `scripts/code-lines.py` prints every file over the limit and
fails when one is not named there; `--all` prints every file's count.
Only the standard library is used.
"""

import os
import re
import sys

LIMIT = 800
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def test_only_files(src):
    """Files declared under #[cfg(test)] (`#[cfg(test)] mod x;`)."""
    out = set()
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            text = open(path, encoding="utf-8").read()
            for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", text):
                base = dirpath if f in ("mod.rs", "lib.rs", "main.rs") else os.path.join(dirpath, f[:-3])
                for cand in (os.path.join(base, m.group(1) + ".rs"), os.path.join(base, m.group(1), "mod.rs")):
                    out.add(os.path.normpath(cand))
    return out


def code_lines(text):
    count = 0
    in_block = False
    depth_test = None  # brace depth at which a test module opened
    depth = 0
    pending_cfg_test = False
    for raw in text.split("\n"):
        line = raw.strip()
        if in_block:
            if "*/" in line:
                in_block = False
                line = line.split("*/", 1)[1].strip()
            else:
                continue
        if line.startswith("/*"):
            if "*/" not in line:
                in_block = True
            continue
        if not line or line.startswith("//"):
            continue
        if line.startswith("#[cfg(test)]"):
            pending_cfg_test = True
        elif pending_cfg_test and re.match(r"(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", line) and depth_test is None:
            depth_test = depth
            pending_cfg_test = False
        elif not line.startswith("#["):
            pending_cfg_test = False
        # Braces in strings are rare enough in this tree to ignore.
        opens, closes = line.count("{"), line.count("}")
        inside = depth_test is not None
        depth += opens - closes
        if inside and depth <= depth_test:
            depth_test = None
            continue
        if not inside and depth_test is None:
            count += 1
    return count


def main():
    srcs = [os.path.join(ROOT, "src")]
    crates = os.path.join(ROOT, "crates")
    if os.path.isdir(crates):
        srcs += [os.path.join(crates, c, "src") for c in sorted(os.listdir(crates))]
    rows = []
    for src in srcs:
        if not os.path.isdir(src):
            continue
        tests = test_only_files(src)
        for dirpath, _, files in os.walk(src):
            for f in sorted(files):
                if not f.endswith(".rs"):
                    continue
                path = os.path.normpath(os.path.join(dirpath, f))
                if path in tests:
                    continue
                n = code_lines(open(path, encoding="utf-8").read())
                rows.append((n, os.path.relpath(path, ROOT)))
    rows.sort(reverse=True)
    if "--all" in sys.argv:
        for n, rel in rows:
            print(f"{n:6} {rel}")
        return 0
    arch = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    long_files = [(n, rel) for n, rel in rows if n > LIMIT]
    missing = [(n, rel) for n, rel in long_files if f"`{rel}`" not in arch]
    for n, rel in long_files:
        mark = "not in docs/ARCHITECTURE.md" if (n, rel) in missing else "named in docs/ARCHITECTURE.md"
        print(f"{n:6} {rel}  ({mark})")
    if missing:
        print(f"error: {len(missing)} file(s) over {LIMIT} lines of code without a line in docs/ARCHITECTURE.md's \"Long files\" saying why", file=sys.stderr)
        return 1
    print(f"{len(rows)} files; {len(long_files)} over {LIMIT} lines of code, each named in docs/ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
