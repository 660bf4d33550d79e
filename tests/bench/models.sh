#!/usr/bin/env bash
# Benchmark: model loads and per-shard times of a model-bearing operator across shards, in
# ray_execution_mode task and actor, with the runner's model reuse and without it
# (ESHARD_DJ_REUSE_MODELS=0), all in one run: 8 shards of 500 rows on one worker (1 rank,
# --ray-mode per-rank with the persistent runner, num_proc 1). The operator is
# eshard_test_model_mapper (tests/dj/custom_ops/eshard_model_ops.py): it loads its "model"
# through Data-Juicer's prepare_model/get_model with a loader that logs each load.
# Targets (issue 28): task <= 2 loads, actor 1 load, median shard 2..8 <= 1.5 s in both modes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(bash "$repo/scripts/build.sh")
venv=${ESHARD_DJ_VENV:-$repo/.venv-dj}
bash "$repo/scripts/setup-dj-env.sh" "$venv" >/dev/null
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 UV_OFFLINE=1 RAY_DATA_DISABLE_PROGRESS_BARS=1
# mpirun of the demo job, as the e2e tests run it (root in containers).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=${ESHARD_BENCH_DIR:-/tmp/eshard-bench-models}
rm -rf "$work"; mkdir -p "$work"
python3 - "$work/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        f.write(json.dumps({"id": i, "text": "row %05d of the model benchmark" % i}) + "\n")
PY
cd "$work"
for mode in task actor; do
  for reuse in 1 0; do
    tag=$mode-reuse$reuse
    cat >"$tag.yaml" <<YAML
project_name: eshard-bench-models
executor_type: ray
ray_address: local
text_keys: text
np: 1
custom_operator_paths: ['$repo/tests/dj/custom_ops/eshard_model_ops.py']
process:
  - eshard_test_model_mapper:
      load_log: '$work/loads.$tag'
      ray_execution_mode: $mode
      num_proc: 1
YAML
    : >"loads.$tag"
    "$bin" prepare --config "$tag.yaml" --dataset-path in.jsonl --job-dir "$work/$tag" --num-shards 8 \
      --python "$venv/bin/python" --dj-process "$venv/bin/dj-process" >/dev/null 2>&1
    start=$(date +%s.%N)
    ESHARD_DJ_REUSE_MODELS=$reuse "$bin" worker --job-dir "$work/$tag" >"$work/$tag.log" 2>&1
    end=$(date +%s.%N)
    echo "$tag: worker wall $(python3 -c "print(round($end - $start, 2))") s for 8 shards" >&2
  done
done
python3 - "$work" <<'PY'
import glob, json, os, statistics, sys
work = sys.argv[1]
print("%-14s %6s %8s  %s" % ("mode", "loads", "median", "seconds per shard (in order of start)"))
for mode in ("task", "actor"):
    for reuse in (1, 0):
        tag = "%s-reuse%d" % (mode, reuse)
        loads = sum(1 for l in open(os.path.join(work, "loads." + tag)) if l.strip())
        att = []
        for a in glob.glob(os.path.join(work, tag, "attempts/*/*/attempt.json")):
            j = json.load(open(a))
            if j.get("status") == "done":
                att.append((j.get("claimed_at_epoch") or 0, j["duration_secs"]))
        secs = [d for _, d in sorted(att)]
        med = statistics.median(secs[1:]) if len(secs) > 1 else float("nan")
        print("%-14s %6d %7.2fs  %s" % (tag, loads, med, " ".join("%.2f" % s for s in secs)))
print("targets: task-reuse1 <= 2 loads, actor-reuse1 1 load, median of shards 2..8 <= 1.5 s")
PY
# The demo job (configs/demo.yaml, 2 ranks, 4 shards; no model-bearing operator): its Summary's
# wall time with and without the reuse, which must cost nothing there.
cd "$repo"
for reuse in 1 0; do
  ESHARD_DJ_REUSE_MODELS=$reuse mpirun --oversubscribe -np 2 "$bin" run --config configs/demo.yaml \
    --dataset-path configs/demo-data --job-dir "$work/demo-reuse$reuse" --num-shards 4 \
    --python "$venv/bin/python" --dj-process "$venv/bin/dj-process" >"$work/demo-reuse$reuse.log" 2>&1
  echo "demo-reuse$reuse: $(grep -o 'wall time [0-9.]*s' "$work/demo-reuse$reuse.log")"
done
