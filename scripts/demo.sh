#!/usr/bin/env bash
# The demo: installs what is missing, builds, sets up Data-Juicer + Ray, and runs the whole job
# on the bundled demo data (configs/demo-data: 64 rows in two files in nested folders) with the
# bundled recipe (configs/demo.yaml: whitespace normalization + text length filter) as a
# 2-rank MPI job on this machine: rank 0 prepares, both ranks claim and process shards with
# Data-Juicer on a node-local Ray head and runner per rank (the default; --ray-mode per-attempt
# starts Ray inside every shard, as the reference does), rank 0 verifies and merges.
#
#   scripts/demo.sh [--process-cmd 'cp {input} {output}'] [--ray-mode per-attempt] [more 'run' options]
#
# ESHARD_DEMO_DIR sets the work folder (default /tmp/eshard-demo); ESHARD_DEMO_RANKS the ranks (2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/install-deps.sh"
bin=$(bash "$repo/scripts/build.sh")
work=${ESHARD_DEMO_DIR:-/tmp/eshard-demo}
ranks=${ESHARD_DEMO_RANKS:-2}

processor=()
case " $* " in
  *" --process-cmd "*) ;;   # a plain command instead of Data-Juicer: no Python environment needed
  *)
    venv=${ESHARD_DJ_VENV:-$repo/.venv-dj}
    bash "$repo/scripts/setup-dj-env.sh" "$venv" >/dev/null
    processor=(--python "$venv/bin/python" --dj-process "$venv/bin/dj-process")
    export PATH="$venv/bin:$PATH"
    ;;
esac
# Offline and quiet: no usage reports, no model or package downloads at run time.
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       PIP_NO_INDEX=1 UV_OFFLINE=1 RAY_DATA_DISABLE_PROGRESS_BARS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

rm -rf "$work"
mkdir -p "$work"
cd "$repo"
echo "== mpirun -np $ranks eshard-mpi run (job folder $work/job)"
set +e
mpirun --oversubscribe -np "$ranks" "$bin" run --config configs/demo.yaml --dataset-path configs/demo-data \
  --job-dir "$work/job" --num-shards 4 --output "$work/merged.jsonl" "${processor[@]}" "$@"
rc=$?
set -e
echo "== eshard-mpi status"
"$bin" status --job-dir "$work/job" || true
if [ "$rc" -eq 0 ]; then
  echo "== first rows of $work/merged.jsonl ($(wc -l <"$work/merged.jsonl") rows of 64 kept by the recipe)"
  head -3 "$work/merged.jsonl"
fi
exit "$rc"
