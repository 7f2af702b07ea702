#!/usr/bin/env bash
# The whole suite under load, as docs/development.md records it: a fresh clone of this
# checkout's HEAD runs `make test` while
#   busy    a busy loop holds one core, or
#   beside  `make test-fast` runs over and over in a second fresh clone.
#
#   benchmarks/suite_under_load.sh WORKDIR busy|beside
#
# WORKDIR/summary gets the commit, each run's exit status and time, and pytest's last line
# (for `beside`, one line per test-fast run as well). Each clone has its own HOME; pip's
# cache is shared (PIP_CACHE_DIR, else ~/.cache/pip). The load is stopped when make test ends.
set -u
work=$1; mode=$2
case "$mode" in busy|beside) ;; *) echo "usage: $0 WORKDIR busy|beside" >&2; exit 2;; esac
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
[ -e "$work" ] && { echo "$work: exists; give a new folder" >&2; exit 2; }
mkdir -p "$work"; work=$(cd "$work" && pwd)
git clone -q "$src" "$work/repo"
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}" HOME="$work/home"; mkdir -p "$HOME"
echo "commit $(git -C "$work/repo" rev-parse --short HEAD) mode $mode start $(date -u +%FT%TZ)" > "$work/summary"
if [ "$mode" = busy ]; then
  python3 -c 'while True: pass' & load=$!
else
  git clone -q "$src" "$work/fast"
  setsid bash -c 'cd "$1/fast" && while :; do s=$(date +%s); make test-fast > "$1/fast-$s.log" 2>&1
    echo "test-fast rc=$? $(( $(date +%s) - s )) s: $(tail -1 "$1/fast-$s.log")" >> "$1/summary"; done' _ "$work" & load=$!
fi
started=$(date +%s)
( cd "$work/repo" && make test ) > "$work/test.log" 2>&1; rc=$?
echo "make test rc=$rc $(( $(date +%s) - started )) s end $(date -u +%FT%TZ)" >> "$work/summary"
kill -- -"$load" 2>/dev/null; kill "$load" 2>/dev/null; sleep 1
# pytest's workers of the second clone: whatever still runs in it
for p in /proc/[0-9]*; do
  case "$(readlink "$p/cwd" 2>/dev/null)" in "$work"/fast*) kill -9 "${p#/proc/}" 2>/dev/null;; esac
done
grep -E "passed|failed" "$work/test.log" | tail -1 >> "$work/summary"
exit $rc
