#!/bin/bash
# `eshard-mpi status` of a finished job on a local disk (issue 29: status cost at 100,000
# shards): a job of N shards is prepared, then made finished as workers leave it (a done
# record, its fence and an attempt folder with attempt.json and the result for every shard,
# written directly: running 100,000 shards through workers would take the hour), and status
# is timed on it.
#
#   tests/bench/status_finished.sh [--bin PATH] [--compare PATH] [--shards N] [--runs K]
#
# --bin: the build to time (default build-test/eshard-mpi); --compare: another build (say,
# from before a change), timed on the same job alternately with --bin, whose text and JSON must
# match --bin's. Prints per build the median wall time of K runs (default 3), its system calls
# (strace -c -f, one run), and the ratio of the medians.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=$src/build-test/eshard-mpi compare="" shards=100000 runs=3
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2 ;;
    --compare) compare=$2 ;;
    --shards) shards=$2 ;;
    --runs) runs=$2 ;;
    *) echo "usage: $0 [--bin PATH] [--compare PATH] [--shards N] [--runs K]" >&2; exit 2 ;;
  esac
  shift 2
done
for b in "$bin" $compare; do [ -x "$b" ] || { echo "status_finished: no build at $b" >&2; exit 2; }; done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
T=$(mktemp -d /tmp/status-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 - "$T/in.jsonl" $((shards * 2)) <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
printf 'project_name: status-bench\nprocess:\n  - text_length_filter:\n      min_len: 1\n' >"$T/recipe.yaml"
"$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards "$shards" \
  --process-cmd "cp {input} {output}" --job-dir "$T/job" >"$T/prepare.out" 2>&1 || { cat "$T/prepare.out"; exit 1; }
python3 "$here/finish_job.py" "$T/job" --results
"$bin" status --job-dir "$T/job" >"$T/status.txt" 2>&1 || { tail -5 "$T/status.txt"; echo "status_finished: status failed" >&2; exit 1; }
grep -q " done=$shards failed=0" "$T/status.txt" ||
  { head -20 "$T/status.txt"; echo "status_finished: the job does not read as finished" >&2; exit 1; }
declare -A times
builds=("$bin" $compare)
for _ in $(seq 1 "$runs"); do
  for b in "${builds[@]}"; do
    t0=$EPOCHREALTIME
    "$b" status --job-dir "$T/job" >/dev/null 2>&1
    t1=$EPOCHREALTIME
    times[$b]="${times[$b]:-} $(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.3f", b - a }')"
  done
done
for b in "${builds[@]}"; do
  calls=$(strace -f -c -o "$T/strace" "$b" status --job-dir "$T/job" >/dev/null 2>&1 && awk '$NF == "total" { print $4 }' "$T/strace" || echo "?")
  # shellcheck disable=SC2086
  echo "status_finished: $shards shards done, $b: median $(median ${times[$b]}) s of $runs (runs:${times[$b]}), $calls system calls"
done
if [ -n "$compare" ]; then
  "$compare" status --job-dir "$T/job" >"$T/old.txt" 2>&1
  "$bin" status --job-dir "$T/job" --json >"$T/new.json" 2>&1
  "$compare" status --job-dir "$T/job" --json >"$T/old.json" 2>&1
  cmp -s "$T/status.txt" "$T/old.txt" && cmp -s "$T/new.json" "$T/old.json" ||
    { echo "status_finished: the two builds' status output differs" >&2; exit 1; }
  # shellcheck disable=SC2086
  echo "status_finished: ratio $(awk -v a="$(median ${times[$bin]})" -v b="$(median ${times[$compare]})" 'BEGIN { printf "%.2f", a / b }') (--bin / --compare), same text and JSON"
fi
