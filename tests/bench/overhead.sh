#!/bin/bash
# Per-shard overhead of the worker: a job of many tiny shards (default 1000 shards of about
# 1 KB, about 1 MB of JSONL) processed by `cp {input} {output}`, one worker, on the regular
# disk (${ESHARD_BENCH_DIR:-/tmp}; /tmp is ext4 here, not tmpfs, so every fsync is real).
#
#   overhead per shard = (worker wall time - time of N bare `cp` runs) / N
#
# The bare `cp` time is measured by running cp on every shard file from a shell loop (one
# fork + exec + copy each), i.e. the child's own cost, right before each worker run;
# attempt.json's duration_secs is not used because it includes the supervisor. 3 runs (each
# on a freshly prepared job), median of the per-run overheads reported; target <= 10 ms (ESHARD_BENCH_TARGET). Then where the time goes: a phase breakdown
# from the event log of the median run, and one extra run under `strace -f -w -c` (skipped
# with ESHARD_BENCH_PROFILE=0) with the syscalls per shard.
# Set ESHARD_BENCH_FAIL=1 to exit 1 above target.
#
# usage: tests/bench/overhead.sh [path/to/eshard-mpi] [shards] [runs]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BIN=${1:-${ESHARD_BIN:-$SRC/build/eshard-mpi}}
N=${2:-1000}
RUNS=${3:-3}
TARGET=${ESHARD_BENCH_TARGET:-10}
[ -x "$BIN" ] || { echo "eshard-mpi binary not found: $BIN (build first or pass its path)" >&2; exit 2; }
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

T=$(mktemp -d "${ESHARD_BENCH_DIR:-/tmp}/eshard-bench-overhead.XXXXXX")
trap 'rm -rf "$T"' EXIT
FS=$(df -T "$T" | awk 'NR == 2 {print $2 " on " $1}')

# N shards of 10 rows of about 100 bytes.
python3 - "$T/in.jsonl" "$N" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(10 * int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "t%06d " % i + "x" * 72}) + "\n")
PY
cat >"$T/recipe.yaml" <<'YAML'
executor_type: ray
process:
  - whitespace_normalization_mapper: {}
YAML
prepare() {
  rm -rf "$1"
  "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$1" --num-shards "$N" \
    --process-cmd 'cp {input} {output}' >/dev/null 2>"$T/prepare.err" || { cat "$T/prepare.err" >&2; exit 2; }
}
now() { date +%s.%N; }

# The children's own cost: N bare cp runs on the shard files (measured before every worker
# run, so that both see the same machine load).
bare_cp() {
  local s e
  mkdir -p "$T/cpout"
  s=$(now)
  for f in "$1"/shards/*.jsonl; do cp "$f" "$T/cpout/out.jsonl"; done
  e=$(now)
  python3 -c "print('%.3f' % ($e - $s))"
}

# Phase breakdown of one run from its event log (claim, start, done events of each shard).
breakdown() {
  python3 - "$1" "$2" <<'PY'
import glob, json, os, statistics, sys
job, n = sys.argv[1], int(sys.argv[2])
ev = sorted((json.loads(l) for f in glob.glob(os.path.join(job, "state/events/*.jsonl")) for l in open(f)),
            key=lambda e: e["time"])
ph = {"claim (scan, lock, attempt.json)": [], "attempt setup (argv, attempt.json)": [],
      "child under its supervisor (spawn to report)": [], "after the child (materialize, publish, release)": []}
keys = list(ph)
last_done = cur = None
for e in ev:
    if e["event"] == "claim":
        if last_done is not None:
            ph[keys[0]].append(e["time"] - last_done)
        cur = {"claim": e["time"]}
    elif e["event"] == "start":
        cur["start"] = e["time"]
        ph[keys[1]].append(e["time"] - cur["claim"])
    elif e["event"] == "done":
        ph[keys[2]].append(e["duration"])
        ph[keys[3]].append(e["time"] - cur["start"] - e["duration"])
        last_done = e["time"]
for k, v in ph.items():
    print("    %-50s median %6.2f ms   mean %6.2f ms" % (k, 1000 * statistics.median(v), 1000 * sum(v) / n))
PY
}

walls=() cps=() overheads=()
for r in $(seq "$RUNS"); do
  prepare "$T/job$r"
  cps+=("$(bare_cp "$T/job$r")")
  sync
  s=$(now)
  "$BIN" worker --job-dir "$T/job$r" >"$T/worker$r.out" 2>"$T/worker$r.err" || { cat "$T/worker$r.err" >&2; exit 2; }
  e=$(now)
  grep -q "All $N shards completed" "$T/worker$r.out" || { echo "run $r did not complete the job" >&2; exit 2; }
  walls+=("$(python3 -c "print('%.3f' % ($e - $s))")")
  overheads+=("$(python3 -c "print('%.2f' % (1000 * ($e - $s - ${cps[$((r - 1))]}) / $N))")")
done
MED_RUN=$(for r in $(seq "$RUNS"); do echo "${overheads[$((r - 1))]} $r"; done | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p" | cut -d' ' -f2)
OVERHEAD=${overheads[$((MED_RUN - 1))]}

echo "eshard-mpi worker overhead: $N shards of ~1 KB, processor 'cp {input} {output}', 1 worker"
echo "  folder:              $T ($FS)"
echo "  machine:             $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  bare cp x $N (s):   ${cps[*]}"
echo "  worker wall (s):     ${walls[*]}"
echo "  overhead/shard (ms): ${overheads[*]}"
python3 - "$OVERHEAD" "$TARGET" <<'PY'
import sys
o, target = float(sys.argv[1]), float(sys.argv[2])
print("  median overhead per shard: %.2f ms (target <= %g ms): %s" % (o, target, "OK" if o <= target else "ABOVE TARGET"))
PY
echo "  where the time goes (event log of the median run, per shard):"
breakdown "$T/job$MED_RUN" "$N"

if [ "${ESHARD_BENCH_PROFILE:-1}" != 0 ] && command -v strace >/dev/null; then
  prepare "$T/jobp"
  strace -f -w -c -o "$T/strace.txt" "$BIN" worker --job-dir "$T/jobp" >/dev/null 2>&1
  echo "  syscalls of the worker, its supervisors and children (strace -f -w -c; wall time in the call):"
  python3 - "$T/strace.txt" "$N" <<'PY'
import sys
n = int(sys.argv[2])
rows = []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 5 and p[0][0].isdigit() and p[-1] != "total":
        secs, calls = float(p[1]), int(p[3])
        rows.append((secs, calls, p[-1]))
rows.sort(reverse=True)
print("    %-14s %10s %14s" % ("syscall", "calls/shard", "ms/shard"))
for secs, calls, name in rows[:12]:
    print("    %-14s %10.1f %14.3f" % (name, calls / n, 1000 * secs / n))
PY
fi

if [ "${ESHARD_BENCH_FAIL:-0}" = 1 ]; then
  python3 -c "import sys; sys.exit(0 if $OVERHEAD <= $TARGET else 1)"
fi
