#!/usr/bin/env bash
# Benchmark: what the launcher's binding costs Data-Juicer. A CPU-bound recipe (the demo's
# operators and four more character-level ones, np: 2) over 20,000 rows of the synthetic corpus
# in 8 shards, under `mpirun -np 1` with Open MPI's default binding (one core), by this build and
# by the build of an earlier revision (default a113fbc, before ranks took their share of the
# node's CPUs: README "CPUs, GPUs and binding"), alternately, RUNS times each (default 3).
# Prints each run's wall time and the CPUs of the rank's Ray head, then the medians and their
# ratio.
#   tests/bench/cpus.sh [REV] [RUNS]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:-a113fbc}
runs=${2:-3}
bin=$(bash "$repo/scripts/build.sh")
venv=${ESHARD_DJ_VENV:-$repo/.venv-dj}
bash "$repo/scripts/setup-dj-env.sh" "$venv" >/dev/null
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 UV_OFFLINE=1 RAY_DATA_DISABLE_PROGRESS_BARS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_hwloc_base_binding_policy
work=${ESHARD_BENCH_DIR:-/tmp/eshard-bench-cpus}
mkdir -p "$work"
# The earlier revision, built once in a worktree of its own.
before=$work/before-$rev
if [ ! -x "$before/build/eshard-mpi" ]; then
  rm -rf "$before"
  git -C "$repo" worktree prune
  git -C "$repo" worktree add -q --detach "$before" "$rev"
  ESHARD_BUILD_DIR=$before/build bash "$before/scripts/build.sh" >/dev/null
fi
if [ ! -s "$work/in.jsonl" ]; then
  python3 "$repo/tests/bench/gen_corpus.py" "$work/corpus.jsonl" 30 >/dev/null
  head -n 20000 "$work/corpus.jsonl" >"$work/in.jsonl"
fi
cat >"$work/recipe.yaml" <<'YAML'
executor_type: ray
ray_address: local
text_keys: text
np: 2
process:
  - whitespace_normalization_mapper:
  - punctuation_normalization_mapper:
  - alphanumeric_filter:
      min_ratio: 0.0
  - character_repetition_filter:
      rep_len: 10
      max_ratio: 1.0
  - special_characters_filter:
      min_ratio: 0.0
      max_ratio: 1.0
  - text_length_filter:
      min_len: 20
      max_len: 100000
YAML
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
declare -A walls opss
for i in $(seq 1 "$runs"); do
  for which in before after; do
    b=$bin; [ "$which" = before ] && b=$before/build/eshard-mpi
    job=$work/job-$which-$i
    rm -rf "$job"
    s=$(date +%s.%N)
    mpirun -np 1 "$b" run --config "$work/recipe.yaml" --dataset-path "$work/in.jsonl" --job-dir "$job" \
      --num-shards 8 --python "$venv/bin/python" --dj-process "$venv/bin/dj-process" >"$job.log" 2>&1 ||
      { tail -20 "$job.log"; echo "cpus: the $which run $i failed (log $job.log)" >&2; exit 1; }
    e=$(date +%s.%N)
    w=$(python3 -c "print(round($e - $s, 1))")
    walls[$which]="${walls[$which]:-} $w"
    head=$(sed -n 's/.*Started a node-local Ray head at [^ ]* in [0-9.]* s with \([0-9]* CPU(s) ([^)]*)\).*/\1/p' "$job.log" | head -1)
    # Ray's CPU resource as Data-Juicer logged it, and the time its operators took in all.
    read -r cpus ops < <(python3 - "$job" <<'PY'
import glob, re, sys
cpus, ops = "?", 0.0
for f in glob.glob(sys.argv[1] + "/attempts/*/*/process.log"):
    text = open(f, errors="replace").read()
    m = re.search(r"'CPU': ([0-9.]+)", text)
    cpus = m.group(1) if m else cpus
    ops += sum(float(t) for t in re.findall(r"All Ops are done in ([0-9.]+)s", text))
print(cpus, round(ops, 1))
PY
)
    rm -rf "$job"
    opss[$which]="${opss[$which]:-} $ops"
    echo "run $i $which: $w s, operators $ops s (Ray head: ${head:-its start line names no CPUs}; Ray's CPU resource $cpus)"
  done
done
# shellcheck disable=SC2086
b=$(median ${walls[before]}); a=$(median ${walls[after]})
echo "median wall time, mpirun -np 1, 8 shards x 2,500 rows, np: 2: before ($rev) $b s, after $a s, after/before $(python3 -c "print(round($a / $b, 2))")"
# shellcheck disable=SC2086
b=$(median ${opss[before]}); a=$(median ${opss[after]})
echo "median operator time (Data-Juicer's 'All Ops are done', summed over the shards): before $b s, after $a s, after/before $(python3 -c "print(round($a / $b, 2))")"
