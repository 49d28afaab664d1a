#!/usr/bin/env python3
"""Tests of scripts/check-imports.py: it fails on folder circles (two-way and
longer) and on file circles, and passes on a clean tree.

Each test builds a small crate tree in a temporary directory (or copies the
simulator's src/ there) and runs the check on it with `--root`. Standard
library only, no network: `python3 scripts/test_check_imports.py`.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check-imports.py")
SIMULATOR = os.path.join(HERE, "..", "crates", "kube-pulse-sim", "src")


def run_check(root):
    """(exit status, stdout + stderr) of the check on the crates under `root`."""
    done = subprocess.run(
        [sys.executable, CHECK, "--root", root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def write_crate(root, files, name="demo"):
    """Writes `files` ({path under src: text}) as crates/NAME/src under `root`."""
    src = os.path.join(root, "crates", name, "src")
    for rel, text in files.items():
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
    return src


class CheckImports(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="check-imports-")
        self.addCleanup(shutil.rmtree, self.root)

    def assert_fails(self, *expected):
        code, out = run_check(self.root)
        self.assertEqual(code, 1, out)
        for text in expected:
            self.assertIn(text, out)
        return out

    def assert_passes(self):
        code, out = run_check(self.root)
        self.assertEqual(code, 0, out)
        return out

    def test_one_direction_between_folders_passes(self):
        write_crate(
            self.root,
            {
                "lib.rs": "mod a;\nmod b;\npub use a::X;\npub use b::Y;\n",
                "a/mod.rs": "mod x;\npub use x::X;\n",
                "a/x.rs": "use crate::b::Y;\npub struct X(pub Y);\n",
                "b/mod.rs": "mod y;\npub use y::Y;\n",
                "b/y.rs": "pub struct Y;\n",
            },
        )
        out = self.assert_passes()
        self.assertIn("crates/demo/src: 5 files, 1 file edges, 2 parts, 1 part edges: no circle", out)

    def test_two_way_folder_import_fails(self):
        write_crate(
            self.root,
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a/mod.rs": "mod x;\npub use x::X;\n",
                "a/x.rs": "use crate::b::Y;\npub struct X;\npub fn y() -> Y { Y }\n",
                "b/mod.rs": "mod y;\npub use y::Y;\n",
                "b/y.rs": "use crate::a::X;\npub struct Y;\npub fn x() -> X { X }\n",
            },
        )
        self.assert_fails(
            "part circle among a/, b/",
            "a/ -> b/: crates/demo/src/a/x.rs:1 uses crates/demo/src/b/y.rs",
            "b/ -> a/: crates/demo/src/b/y.rs:1 uses crates/demo/src/a/x.rs",
        )

    def test_two_way_folder_import_without_a_file_circle_fails(self):
        # a/x.rs -> b/y.rs and b/z.rs -> a/w.rs: no file circle, a folder one.
        write_crate(
            self.root,
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a/mod.rs": "pub mod w;\npub mod x;\n",
                "a/w.rs": "pub struct W;\n",
                "a/x.rs": "use crate::b::y::Y;\npub fn y() -> Y { Y }\n",
                "b/mod.rs": "pub mod y;\npub mod z;\n",
                "b/y.rs": "pub struct Y;\n",
                "b/z.rs": "pub fn w() -> crate::a::w::W { crate::a::w::W }\n",
            },
        )
        out = self.assert_fails("part circle among a/, b/", "1 part circle(s)")
        self.assertIn("0 file circle(s)", out)

    def test_longer_folder_circle_fails(self):
        # a -> b -> c -> a through four different files.
        write_crate(
            self.root,
            {
                "lib.rs": "mod a;\nmod b;\nmod c;\n",
                "a/mod.rs": "pub mod w;\npub mod x;\n",
                "a/w.rs": "pub struct W;\n",
                "a/x.rs": "use crate::b::Y;\npub fn y() -> Y { Y }\n",
                "b/mod.rs": "mod y;\npub use y::Y;\n",
                "b/y.rs": "pub struct Y;\npub fn z() -> crate::c::Z { crate::c::Z }\n",
                "c/mod.rs": "pub struct Z;\n\npub fn w() -> crate::a::w::W {\n    crate::a::w::W\n}\n",
            },
        )
        out = self.assert_fails(
            "part circle among a/, b/, c/",
            "a/ -> b/ -> c/ -> a/",
            "a/ -> b/: crates/demo/src/a/x.rs:1 uses crates/demo/src/b/y.rs",
            "b/ -> c/: crates/demo/src/b/y.rs:2 uses crates/demo/src/c/mod.rs",
            "c/ -> a/: crates/demo/src/c/mod.rs:3 uses crates/demo/src/a/w.rs",
        )
        self.assertIn("0 file circle(s)", out)

    def test_folder_circle_through_a_top_level_file_fails(self):
        write_crate(
            self.root,
            {
                "lib.rs": "mod a;\nmod config;\n",
                "a/mod.rs": "use crate::config::Config;\npub struct A(Config);\n",
                "config.rs": "pub struct Config;\npub fn first() -> Option<crate::a::A> { None }\n",
            },
        )
        self.assert_fails("part circle among a/, config.rs")

    def test_each_crate_is_its_own_graph(self):
        # `crate::` in one crate names that crate: the same module names in two
        # crates, each importing one way, make no circle.
        write_crate(
            self.root,
            {"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n", "b.rs": "pub struct B;\n"},
            name="one",
        )
        write_crate(
            self.root,
            {"main.rs": "mod a;\nmod b;\nfn main() {}\n", "a.rs": "pub struct A;\n", "b.rs": "use crate::a::A;\n"},
            name="two",
        )
        out = self.assert_passes()
        self.assertIn("crates/one/src: 3 files", out)
        self.assertIn("crates/two/src: 3 files", out)

    def test_simulator_copy_passes_clean_and_fails_with_a_planted_file_circle(self):
        copy = os.path.join(self.root, "crates", "kube-pulse-sim", "src")
        shutil.copytree(SIMULATOR, copy)
        out = self.assert_passes()
        self.assertRegex(out, r"crates/kube-pulse-sim/src: \d+ files, .*: no circle")

        # status.rs is near the bottom (the store uses its ApiError): a use of
        # the store from it closes a circle between files.
        with open(os.path.join(copy, "status.rs"), "a", encoding="utf-8") as f:
            f.write("\n#[allow(unused_imports)]\nuse crate::store::Store;\n")
        out = self.assert_fails("import circle: ", "crates/kube-pulse-sim/src/status.rs")
        self.assertRegex(out, r"[1-9]\d* file circle\(s\)")


if __name__ == "__main__":
    unittest.main()
