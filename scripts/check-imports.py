#!/usr/bin/env python3
"""Checks that each crate's modules import each other without a circle.

The crates are the gateway (src/) and every crate under crates/ (its
crates/NAME/src), each on its own: `crate::` inside crates/kube-pulse-sim/src
means that crate. A crate's root is its lib.rs, or its main.rs when it has
no lib.rs; a main.rs or bin/ beside a lib.rs is a crate of its own (it
reaches the library by name), and is left out.

Two graphs are built per crate, and a circle in either fails the check.

Files. Nodes are files: src/engine/mod.rs is `crate::engine`,
src/auth/scope.rs is `crate::auth::scope`. An edge A -> B is any path in A's
code (a `use` tree, or a path in an expression or a type) that starts with
`crate::`, `super::` or `self::`, or with the name of a child module A
declares (`mod watch;` then `watch::run`), and names an item of B. The
longest file module the path reaches is the target
(`crate::hub::pattern::Pattern` is hub/pattern.rs, `crate::hub::Hub` is
the file hub/mod.rs re-exports it from). Unit tests count: a test
module is code of its file (its `super::` is the file itself).

The parent rule: a mod.rs (or the crate root) may declare its children
(`mod x;`) and re-export their items (`pub use x::Item;`, `pub(crate) use
…`) without an edge: a re-export is followed to the file that defines the
item, so importing `crate::tasks::Task` is an edge to tasks/model.rs, not to
tasks/mod.rs. Any other use of a child's item by mod.rs is an edge, as is a
child's use of an item defined in mod.rs (`super::Transports`). So a mod.rs
and a child may use each other's items in one direction only; both
directions form a circle and are reported like any other.

Parts. Nodes are the top-level parts of a crate's src: each top-level file
or folder (`hub/`, `config.rs`, …); the crate root (lib.rs, main.rs) is no
part, it may declare and re-export everything. An edge A -> B is any file
edge from a file of A to a file of B. Any circle among parts fails: a
two-way pair A <-> B as much as a longer A -> B -> C -> A. A knot is printed
with its parts and, for each part, a shortest circle through it with one
`file:line` example per edge.

Known circles in modules this check arrived after are waived edge by edge
(WAIVED below, each with the reason it still exists): a waived edge is left
out of both graphs and named on every run, so a new circle through other
edges still fails. Remove a waiver when its edge is gone.

Layer rules (LAYERS below) state what the lowest parts of the gateway may
import at all: the wire (protocol/), names and the HTTP settings nothing,
the status machines only the wire, the hub and live queries only the
wire, sources only the
engine's input, the status machines and error classification, the file
format (config.rs) only leaves and the value types of sources and health,
health only error classification. An edge that breaks one is reported.

Output: one summary line per crate (its files, file edges, parts and part
edges), then each circle and broken rule. Exit status: 0 without a circle or
broken rule in any crate, 1 with one (a file circle printed once per knot as
`a.rs -> b.rs -> a.rs`, with the line of each edge's first use).
`--graph` prints every file edge and part edge; `--root DIR` checks the
crates under DIR (DIR/src and DIR/crates/*/src) instead of this repository.
Only the standard library is used.
"""

import os
import re
import sys

# (from, to) file pairs, relative to the repository, mapped to the reason:
# edges that close circles which are known and not yet opened. Each one is
# debt, not a rule; none is left. Add one only with the reason it cannot be
# opened yet, e.g. ("src/a/b.rs", "src/a/mod.rs"): "b.rs uses super::Thing,
# which routes to b".
WAIVED = {}

# The rules of docs/ARCHITECTURE.md that a file's imports can break (the
# gateway's, src/ only): each entry names a part of src/ (a directory or a
# file) and the parts it may
# import besides itself. Parts not listed here may import anything below
# them, as long as no circle forms.
LAYERS = {
    # The wire depends on nothing else in the crate.
    "protocol/": (),
    "names.rs": (),
    # When a watch lists again: kube-rs only.
    "relist.rs": (),
    # Status machines are pure: values in, values out.
    "status/": ("protocol/", "names.rs"),
    "classify.rs": ("status/",),
    # The hub never knows transports, engine, sources or tasks.
    "hub/": ("protocol/",),
    # Live queries are pure: documents in, window operations out.
    "query/": ("protocol/",),
    # Sources feed only the engine: they send Observations and touch no
    # hub, transport or task.
    "sources/": ("engine/observation.rs", "status/", "classify.rs", "names.rs", "protocol/", "relist.rs"),
    # Settings values the file format and the flags name: leaves.
    "http_settings.rs": (),
    # The file format names value types of low parts only; each owner
    # converts its block into runtime settings, never the file itself.
    "config.rs": ("error.rs", "names.rs", "http_settings.rs", "sources/", "health/", "status/"),
    # Health checks know nothing of the gateway that registers them.
    "health/": ("classify.rs", "testing.rs"),
}


def part_of(rel, part):
    return rel == part or (part.endswith("/") and rel.startswith(part))


def layer_breaks(edges):
    """(from, to, line, part) for every edge a LAYERS rule forbids."""
    out = []
    for a, targets in sorted(edges.items()):
        for part, allowed in LAYERS.items():
            if not part_of(a, part):
                continue
            for b, line in sorted(targets.items()):
                if part_of(b, part) or any(part_of(b, p) for p in allowed):
                    continue
                out.append((a, b, line, part))
    return out


# The crate whose files LAYERS speaks of, relative to the root.
LAYERED_CRATE = "src"

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_path(rel, has_lib):
    """src-relative file path -> module path tuple; None for other crates."""
    parts = rel[:-3].split(os.sep)
    if parts == ["lib"]:
        return ()
    if parts == ["main"] and not has_lib:
        return ()
    if parts == ["main"] or parts[0] == "bin":
        return None  # binaries beside a library are crates of their own
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def strip(text):
    """Blanks comments, strings and char literals (keeping line breaks)."""
    out = []
    i, n = 0, len(text)
    char_lit = re.compile(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'")
    raw = re.compile(r'b?r(#*)"')

    def blank(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (c in "rb") and raw.match(text, i) and (i == 0 or not re.match(r"\w", text[i - 1])):
            m = raw.match(text, i)
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'" and char_lit.match(text, i):
            m = char_lit.match(text, i)
            out.append(blank(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_tree(tree):
    """`a::{b, c::{d, self}}` -> [[a, b], [a, c, d], [a, c]] (`*` kept)."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"\bas\b" + IDENT, "", tree)  # never happens without spaces
    paths = []

    def parse(s, prefix):
        # split top-level commas
        depth, start, items = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(s[start:k])
                start = k + 1
        items.append(s[start:])
        for item in items:
            if not item:
                continue
            brace = item.find("{")
            if brace >= 0:
                head = [p for p in item[:brace].split("::") if p]
                parse(item[brace + 1 : item.rindex("}")], prefix + head)
            else:
                segs = [p for p in item.split("::") if p]
                if segs == ["self"]:
                    paths.append(prefix)
                else:
                    paths.append(prefix + segs)

    parse(tree, [])
    return paths


class File:
    def __init__(self, src, rel, mod):
        self.rel, self.mod = rel, mod
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            self.code = strip(f.read())
        self.children = set()  # child modules declared with `mod x;`
        self.reexports = {}  # name -> absolute path of the re-exported item
        self.refs = []  # (line, absolute path) of every use
        self.scan()

    def line(self, pos):
        return self.code.count("\n", 0, pos) + 1

    def inline_depth(self, pos):
        return sum(1 for (a, b) in self.inline if a < pos < b)

    def scan(self):
        code = self.code
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*;", code):
            self.children.add(m.group(1))
        # inline modules (`mod tests { … }`): spans, for `super::` inside them
        self.inline = []
        for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", code):
            depth, j = 1, m.end()
            while j < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            self.inline.append((m.end(), j))
        use_spans = []
        use_re = r"(?:\bpub(?:\s*\([^)]*\))?\s+)?\buse\s+([^;]+);"
        for m in re.finditer(use_re, code):
            use_spans.append((m.start(), m.end()))
            reexport = m.group(0).lstrip().startswith("pub")
            tree = re.sub(r"\s+as\s+" + IDENT, "", m.group(1))
            aliases = dict(
                re.findall(r"(" + IDENT + r")\s+as\s+(" + IDENT + ")", m.group(1))
            )
            for segs in expand_tree(tree):
                path = self.resolve(segs, m.start(), in_use=True)
                if path is None:
                    continue
                if reexport and segs[-1] != "*":
                    self.reexports[aliases.get(segs[-1], segs[-1])] = path
                if reexport and self.is_child_path(path):
                    continue  # the parent rule: a re-export is no edge
                self.refs.append((self.line(m.start()), path))
        starts = r"(?<![\w:$])((?:crate|super|self|" + "|".join(
            sorted(self.children) or ["crate"]
        ) + r")(?:\s*::\s*" + IDENT + r")+)"
        for m in re.finditer(starts, code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            if re.search(r"\bmod\s*$", code[: m.start()]):
                continue
            segs = re.sub(r"\s+", "", m.group(1)).split("::")
            path = self.resolve(segs, m.start(), in_use=False)
            if path is not None:
                self.refs.append((self.line(m.start()), path))

    def is_child_path(self, path):
        return len(path) > len(self.mod) and path[: len(self.mod)] == self.mod and (
            path[len(self.mod)] in self.children
        )

    def resolve(self, segs, pos, in_use):
        """Path segments -> absolute module path, or None if outside the crate."""
        if not segs:
            return None
        head = segs[0]
        here = list(self.mod)
        if head == "crate":
            return tuple(segs[1:])
        if head in ("self", "super"):
            inline = self.inline_depth(pos)
            k = 0
            while k < len(segs) and segs[k] in ("self", "super"):
                if segs[k] == "super":
                    if inline:
                        inline -= 1
                    else:
                        if not here:
                            return None
                        here.pop()
                k += 1
            return tuple(here + segs[k:])
        if head in self.children:
            return tuple(here + segs)
        return None


def crate_dirs(root):
    """(name, src dir) of every crate under `root`: the gateway's src/, then
    crates/*/src; the name is the src dir relative to `root`."""
    out = []
    if os.path.isdir(os.path.join(root, "src")):
        out.append("src")
    crates = os.path.join(root, "crates")
    if os.path.isdir(crates):
        for name in sorted(os.listdir(crates)):
            if os.path.isdir(os.path.join(crates, name, "src")):
                out.append(os.path.join("crates", name, "src"))
    return [(name, os.path.join(root, name)) for name in out]


def scan_crate(src):
    """The files of the crate in `src` by module path, and the file edges
    between them: {rel: {rel: first line}}, rels relative to `src`."""
    has_lib = os.path.isfile(os.path.join(src, "lib.rs"))
    files = {}
    for dirpath, dirnames, names in os.walk(src):
        dirnames.sort()
        for name in sorted(names):
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, name), src)
                mod = module_path(rel, has_lib)
                if mod is not None:
                    files[mod] = File(src, rel, mod)

    def target(path, seen=()):
        """The file defining `path`, following re-exports."""
        for k in range(len(path), -1, -1):
            if path[:k] in files:
                f = files[path[:k]]
                rest = path[k:]
                if rest and rest[0] in f.reexports and path not in seen:
                    via = f.reexports[rest[0]]
                    return target(via + rest[1:], seen + (path,))
                return f
        return None

    edges = {}  # rel -> {rel: first line}
    for f in files.values():
        out = edges.setdefault(f.rel, {})
        for line, path in f.refs:
            t = target(path)
            if t is not None and t.rel != f.rel:
                out[t.rel] = min(line, out.get(t.rel, line))
    return files, edges


def top_part(rel, roots):
    """The top-level part of src a file belongs to (`hub/`, `config.rs`), or
    None for the crate root."""
    if rel in roots:
        return None
    head, sep, _ = rel.partition(os.sep)
    return head + "/" if sep else head


def part_graph(edges, roots):
    """{part: {part: (file, line, target file)}}: the first file edge (by file,
    then line) from any file of one part to any file of another."""
    parts = {}
    for a in sorted(edges):
        pa = top_part(a, roots)
        if pa is None:
            continue
        out = parts.setdefault(pa, {})
        for b, line in sorted(edges[a].items(), key=lambda e: (e[1], e[0])):
            pb = top_part(b, roots)
            if pb is None or pb == pa:
                continue
            if pb not in out or (a, line) < out[pb][:2]:
                out[pb] = (a, line, b)
        for b in edges[a]:
            pb = top_part(b, roots)
            if pb is not None:
                parts.setdefault(pb, {})
    return parts


def knots(edges):
    """Strongly connected components of more than one node (Tarjan), each
    sorted, in a stable order."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(comps)


def shortest_circle(edges, members, start):
    """[start, …, start]: a shortest circle through `start` within `members`
    (breadth first)."""
    prev, queue, found = {start: None}, [start], None
    while queue and found is None:
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w == start:
                found = v
                break
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    chain = [start]
    v = found
    while v is not None and v != start:
        chain.insert(1, v)
        v = prev[v]
    chain.append(start)
    return chain


def check_crate(name, src, show_graph):
    """Prints the crate's summary, circles and broken rules; returns
    (file circles, part circles, broken rules)."""
    files, edges = scan_crate(src)

    def at(rel):
        return os.path.join(name, rel)

    notes = []
    for (a, b), why in sorted(WAIVED.items()):
        if not a.startswith(name + os.sep):
            continue
        ra, rb = os.path.relpath(a, name), os.path.relpath(b, name)
        if rb in edges.get(ra, {}):
            notes.append(f"waived: {a} -> {b} ({why})")
            del edges[ra][rb]
        else:
            notes.append(f"note: waiver {a} -> {b} is no longer needed; remove it")

    roots = {f.rel for f in files.values() if f.mod == ()}
    parts = part_graph(edges, roots)
    file_knots = knots(edges)
    part_knots = knots(parts)
    breaks = layer_breaks(edges) if name == LAYERED_CRATE else []

    n_edges = sum(len(t) for t in edges.values())
    n_part_edges = sum(len(t) for t in parts.values())
    verdict = []
    if file_knots:
        verdict.append(f"{len(file_knots)} file circle(s)")
    if part_knots:
        verdict.append(f"{len(part_knots)} part circle(s)")
    if breaks:
        verdict.append(f"{len(breaks)} layer rule(s) broken")
    print(
        f"{name}: {len(files)} files, {n_edges} file edges, {len(parts)} parts, "
        f"{n_part_edges} part edges: {', '.join(verdict) or 'no circle'}"
        + (", every layer rule holds" if name == LAYERED_CRATE and not breaks else "")
    )
    for note in notes:
        print(f"  {note}")

    if show_graph:
        for a in sorted(edges):
            for b, line in sorted(edges[a].items()):
                print(f"  {at(a)}:{line} -> {at(b)}")
        for a in sorted(parts):
            for b, (f, line, t) in sorted(parts[a].items()):
                print(f"  part {a} -> {b} ({at(f)}:{line} -> {at(t)})")

    for a, b, line, part in breaks:
        allowed = ", ".join(at(p) for p in LAYERS[part]) or "itself"
        print(f"  layer rule broken: {at(a)} (line {line}) imports {at(b)}; {at(part)} may import only {allowed}")

    for comp in file_knots:
        chain = shortest_circle(edges, set(comp), comp[0])
        steps = " -> ".join(f"{at(a)} (line {edges[a][b]})" for a, b in zip(chain, chain[1:]))
        print(f"  import circle: {steps} -> {at(comp[0])}")
        if len(comp) > len(chain) - 1:
            print(f"    (the same knot also holds: {', '.join(at(c) for c in comp if c not in chain)})")

    for comp in part_knots:
        print(f"  part circle among {', '.join(comp)}:")
        seen = set()
        for start in comp:
            chain = shortest_circle(parts, set(comp), start)
            steps = list(zip(chain, chain[1:]))
            key = frozenset(steps)
            if key in seen:
                continue
            seen.add(key)
            print(f"    {' -> '.join(chain)}")
            for a, b in steps:
                f, line, t = parts[a][b]
                print(f"      {a} -> {b}: {at(f)}:{line} uses {at(t)}")
    return len(file_knots), len(part_knots), len(breaks)


def main(argv):
    root = ROOT
    if "--root" in argv:
        k = argv.index("--root")
        if k + 1 >= len(argv):
            print("--root needs a directory", file=sys.stderr)
            return 2
        root = argv[k + 1]
    crates = crate_dirs(root)
    if not crates:
        print(f"no crate under {root} (src/ or crates/*/src)", file=sys.stderr)
        return 2
    totals = [0, 0, 0]
    for name, src in crates:
        for k, n in enumerate(check_crate(name, src, "--graph" in argv)):
            totals[k] += n
    files, parts, breaks = totals
    if files or parts or breaks:
        print(
            f"{files} file circle(s), {parts} part circle(s), {breaks} layer rule(s) broken",
            file=sys.stderr,
        )
        return 1
    print(f"no import circle in {len(crates)} crate(s), and every layer rule holds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
