#!/bin/bash
# Backup attempts against a straggler: 'eshard-mpi run' on 2 fake hosts (tests/e2e/fakehosts.sh),
# 4 equal shards, node2 12x slower (1 s against 12 s a shard), with backups (the default) and
# with --no-backup, alternately, ESHARD_BENCH_RUNS times each. Prints each run's mpirun wall
# time, makespan (first claim to the last done record, from the event logs), attempts and
# whether a backup won, then the medians and their ratio. Target: the job under 8 s with
# backups (14.5 s without, the issue's figure).
#
# usage: tests/bench/backup.sh [path/to/eshard-mpi]      ESHARD_BENCH_RUNS (3), MPIEXEC (mpirun)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BIN=${1:-${ESHARD_BIN:-$SRC/build/eshard-mpi}}
RUNS=${ESHARD_BENCH_RUNS:-3}
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$BIN" ] || { echo "eshard-mpi binary not found: $BIN (build first or pass its path)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/eshard-bench-backup.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "ERROR: $*" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
# shellcheck source=tests/e2e/fakehosts.sh disable=SC1091
. "$SRC/tests/e2e/fakehosts.sh"
fakehosts_check
fakehosts_setup 2

python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"id": i, "text": "backup row %d " % i + "b" * (i % 23)}) + "\n")
PY
printf 'process:\n  - whitespace_normalization_mapper: {}\n' >"$T/recipe.yaml"
cat >"$T/slow-host.sh" <<'EOF'
#!/bin/sh
if [ "$(hostname)" = node2 ]; then sleep 12; else sleep 1; fi
cp "$1" "$2"
EOF
chmod +x "$T/slow-host.sh"

echo "backup: 2 ranks on node1, node2 (node2 12x slower), 4 shards of 1 s on node1; $RUNS runs each way"
: >"$T/results"
for run in $(seq 1 "$RUNS"); do
  for mode in backup no-backup; do
    J=$T/$mode$run
    extra=()
    [ "$mode" = no-backup ] && extra=(--no-backup)
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    timeout 120 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 2 -npernode 1 "$BIN" run --config "$T/recipe.yaml" \
      --dataset-path "$T/in.jsonl" --num-shards 4 --job-dir "$J" --poll-interval-secs 1 "${extra[@]}" \
      --process-cmd "$T/slow-host.sh {input} {output}" >"$T/out" 2>"$T/err" || { cat "$T/err" >&2; fail "$mode run $run failed"; }
    t1=$(date +%s.%N)
    python3 - "$J" "$mode" "$t0" "$t1" >>"$T/results" <<'PY'
import glob, json, os, sys
job, mode, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
claims, dones = [], []
for p in glob.glob(os.path.join(job, "state", "events", "*.jsonl")):
    for line in open(p):
        e = json.loads(line)
        if e.get("event") in ("claim", "backup"):
            claims.append(e["time"])
        elif e.get("event") == "done":
            dones.append(e["time"])
atts = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json"))]
won = sum(1 for a in atts if a.get("backup") and a.get("status") == "done")
print(mode, "%.3f" % (t1 - t0), "%.3f" % (max(dones) - min(claims)), len(atts), won)
PY
    read -r _ wall mk att won < <(tail -1 "$T/results")
    echo "run $run $mode: mpirun wall ${wall}s, makespan ${mk}s, $att attempts, $won backup(s) won"
  done
done
python3 - "$T/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = lambda mode, i: statistics.median(float(r[i]) for r in rows if r[0] == mode)
wb, wn, mb, mn = med("backup", 1), med("no-backup", 1), med("backup", 2), med("no-backup", 2)
print("median: with backups wall %.2f s (makespan %.2f s; target < 8 s: %s), --no-backup wall %.2f s (makespan %.2f s); "
      "wall ratio %.2f" % (wb, mb, "met" if wb < 8 else "MISSED", wn, mn, wb / wn))
PY
