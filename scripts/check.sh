#!/usr/bin/env bash
# The check lane: what needs only cargo and Python, with no installs and no
# network. Format, lints, the import rules, cargo-deny when it is installed,
# and the unit and doc tests of every crate. Minutes on a warm machine;
# `.ci/run` runs it first and `scripts/test.sh` runs it as its first stage.
#
# Each stage prints the seconds it took; a summary ends the run. The lane
# stops at the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/stages.sh
. scripts/stages.sh

if cargo fmt --version >/dev/null 2>&1; then
  stage "cargo fmt --check" cargo fmt --all -- --check
else
  skip "cargo fmt --check" "rustfmt is not installed"
fi
if cargo clippy --version >/dev/null 2>&1; then
  stage "cargo clippy -D warnings" cargo clippy --locked --workspace --all-targets -- -D warnings
else
  skip "cargo clippy" "clippy is not installed"
fi
stage "import rules (scripts/check-imports.py)" python3 scripts/check-imports.py
stage "import rules' own tests (scripts/test_check_imports.py)" python3 scripts/test_check_imports.py
stage "long files are named in docs/ARCHITECTURE.md (scripts/code-lines.py)" python3 scripts/code-lines.py
if command -v cargo-deny >/dev/null 2>&1; then
  stage "cargo deny (licenses, bans, sources)" \
    cargo deny --workspace --all-features check licenses bans sources
else
  skip "cargo deny" "cargo-deny is not installed; scripts/test.sh installs it"
fi
stage "unit tests (cargo test --lib --bins)" cargo test --locked --workspace --lib --bins
stage "doc tests (cargo test --doc)" cargo test --locked --workspace --doc
