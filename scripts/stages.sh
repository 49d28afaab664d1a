# Sourced by scripts/check.sh and scripts/test.sh: named, timed stages and a
# summary at exit. `stage NAME CMD…` runs CMD, prints the seconds it took
# and stops the run when it fails; `skip NAME WHY` records a stage left out.
# The summary (each stage, its result and its seconds, then the total) is
# printed once, when the script exits, whether it passed or not.

STAGES_T0=$SECONDS
STAGES_SUMMARY=()

stages_summary() {
  local status=$?
  [ ${#STAGES_SUMMARY[@]} -gt 0 ] || return 0
  printf '\n==> summary (%s)\n' "$(basename "$0")"
  printf '%s\n' "${STAGES_SUMMARY[@]}"
  printf '  %-7s %5ss  %s\n' "$([ $status -eq 0 ] && echo passed || echo FAILED)" \
    "$((SECONDS - STAGES_T0))" "in all"
}
trap stages_summary EXIT

stage() {
  local name=$1
  shift
  printf '\n==> %s\n' "$name"
  local t0=$SECONDS status=0
  "$@" || status=$?
  local took=$((SECONDS - t0))
  if [ $status -eq 0 ]; then
    printf '==> %s: passed in %ss\n' "$name" "$took"
    STAGES_SUMMARY+=("$(printf '  %-7s %5ss  %s' passed "$took" "$name")")
  else
    printf '==> %s: FAILED (exit %s) after %ss\n' "$name" "$status" "$took" >&2
    STAGES_SUMMARY+=("$(printf '  %-7s %5ss  %s' FAILED "$took" "$name")")
    exit "$status"
  fi
}

skip() {
  printf '\n==> %s: skipped (%s)\n' "$1" "$2"
  STAGES_SUMMARY+=("$(printf '  %-7s %5s   %s (%s)' skipped - "$1" "$2")")
}
