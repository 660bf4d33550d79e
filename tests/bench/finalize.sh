#!/bin/bash
# Finalize benchmark: the time from a job's last done record to rank 0's PASS line (verify,
# merge, re-read), with the merge while working (the default) and with --merge-at-end, on a
# SIZE_MB corpus (default 1024) in 16 shards under mpirun -np 2. The processor copies its shard
# after sleeping 0.5 s per shard index mod 4, so the shards finish over some seconds, as in a
# real job. Each mode runs ESHARD_BENCH_RUNS times (3), alternately; prints every figure and
# the medians. The job folders live under TMPDIR (about 4x SIZE_MB of disk each, one at a time).
#
# usage: tests/bench/finalize.sh [path/to/eshard-mpi] [size_mb]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BIN=${1:-${ESHARD_BIN:-$SRC/build/eshard-mpi}}
SIZE_MB=${2:-1024}
RUNS=${ESHARD_BENCH_RUNS:-3}
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$BIN" ] || { echo "eshard-mpi binary not found: $BIN (build first or pass its path)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/eshard-bench-finalize.XXXXXX")
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

python3 "$HERE/gen_corpus.py" "$T/corpus.jsonl" "$SIZE_MB" >/dev/null
printf 'process:\n  - whitespace_normalization_mapper: {}\n' >"$T/recipe.yaml"
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
i=$(echo "$3" | sed 's/^part-0*\([0-9][0-9]*\)-of-.*/\1/; s/^part-0*-of-.*/0/')
sleep "$(awk -v i="$i" 'BEGIN { printf "%.1f", (i % 4) * 0.5 }')"
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
echo "finalize: $(du -m "$T/corpus.jsonl" | cut -f1) MB in 16 shards, mpirun -np 2, $RUNS runs each way"
: >"$T/results"
for run in $(seq 1 "$RUNS"); do
  for mode in follow at-end; do
    extra=()
    [ "$mode" = at-end ] && extra=(--merge-at-end)
    rm -rf "$T/job" "$T/merged.jsonl"
    sync
    # Each stdout line gets its arrival time, so the PASS line's time is known.
    timeout 900 "$MPIRUN" -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/corpus.jsonl" \
      --num-shards 16 --job-dir "$T/job" --output "$T/merged.jsonl" "${extra[@]}" \
      --process-cmd "$T/proc.sh {input} {output} {shard_id}" 2>"$T/err" |
      python3 -c 'import sys, time
for l in sys.stdin: print("%.6f %s" % (time.time(), l), end="", flush=True)' >"$T/out" ||
      { cat "$T/err" >&2; echo "ERROR: $mode run $run failed" >&2; exit 2; }
    python3 - "$T/job" "$T/out" "$mode" >>"$T/results" <<'PY'
import glob, json, os, sys
job, out, mode = sys.argv[1:4]
dones = [json.loads(l)["time"] for p in glob.glob(os.path.join(job, "state", "events", "*.jsonl"))
         for l in open(p) if json.loads(l).get("event") == "done"]
pass_t = [float(l.split(" ", 1)[0]) for l in open(out) if l.split(" ", 1)[1].startswith("PASS: ")]
merged = [l.split(" ", 1)[1].strip() for l in open(out) if l.split(" ", 1)[1].startswith("Merged ")]
if len(pass_t) != 1 or not merged:
    sys.exit("no PASS line")
print(mode, "%.3f" % (pass_t[0] - max(dones)), merged[0].replace(" ", "_"))
PY
    read -r _ fin merged < <(tail -1 "$T/results")
    echo "run $run $mode: last done record to PASS ${fin}s (${merged//_/ })"
  done
done
python3 - "$T/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = lambda mode: statistics.median(float(r[1]) for r in rows if r[0] == mode)
f, e = med("follow"), med("at-end")
print("median: last done record to PASS %.2f s merging while working, %.2f s with --merge-at-end (ratio %.2f)" % (f, e, f / e))
PY
