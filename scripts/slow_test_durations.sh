#!/usr/bin/env bash
# Time the slow subset test by test (issue 58: where its minutes go): runs
# `python -m pytest -m slow --durations=0 -q` from the repository root and keeps, in $DURATIONS_DIR (default
# test_durations/, git-ignored):
#   slow_<UTC time>_<commit>.log  the whole output, headed by the date, commit, CPU, cores and torch's capability,
#                                 ended by the wall time and exit status;
#   slow_<UTC time>_<commit>.tsv  seconds, phase (setup / call / teardown) and test id, slowest first
#                                 (a module or session fixture's time is in the setup of the first test using it);
#   slow_<UTC time>_<commit>_per_test.tsv  setup + call + teardown per test id, slowest first.
#
#   scripts/slow_test_durations.sh [pytest arguments, e.g. tests/test_tutorials.py, or -n 2 with pytest-xdist]
#   DURATIONS_DIR=/somewhere/else scripts/slow_test_durations.sh
#
# Exits with pytest's status. Run it on idle cores: other work on the machine lengthens every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${DURATIONS_DIR:-test_durations}"
mkdir -p "$out"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git status --porcelain --untracked-files=no 2>/dev/null | head -c1)"
name="$out/slow_$(date -u +%Y%m%dT%H%MZ)_${commit}${dirty:+-dirty}"
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
capability="$(python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())' 2>/dev/null || echo unknown)"
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse HEAD 2>/dev/null || echo unknown)${dirty:+ (with uncommitted changes)}"
  echo "# CPU: ${cpu:-unknown}, $(nproc) cores, torch CPU capability $capability, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# python -m pytest -m slow --durations=0 -q $*"
} >"$name.log"
start=$SECONDS
set +e
python -m pytest -m slow --durations=0 -q "$@" 2>&1 | tee -a "$name.log"
status=${PIPESTATUS[0]}
set -e
wall=$((SECONDS - start))
echo "# wall $((wall / 60)) min $((wall % 60)) s, pytest exit status $status" | tee -a "$name.log"
# pytest's duration lines: "123.45s call     tests/test_x.py::test_y[param]"
grep -E '^[0-9]+\.[0-9]+s +(setup|call|teardown) +' "$name.log" |
  awk '{ d = $1; phase = $2; sub(/^[^ ]+ +[^ ]+ +/, ""); sub(/s$/, "", d); print d "\t" phase "\t" $0 }' |
  sort -t$'\t' -k1,1gr >"$name.tsv" || true
awk -F'\t' '{ t[$3] += $1 } END { for (k in t) printf "%.2f\t%s\n", t[k], k }' "$name.tsv" |
  sort -t$'\t' -k1,1gr >"${name}_per_test.tsv"
echo "durations: $name.tsv, per test: ${name}_per_test.tsv, log: $name.log"
exit "$status"
