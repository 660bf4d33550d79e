#!/usr/bin/env bash
# Benchmark: 8 shards of the demo recipe on one worker, with --ray-mode per-attempt (Ray starts
# inside every shard's Data-Juicer run) and per-rank (one node-local head and one persistent
# Data-Juicer runner reused; also without the runner, --no-dj-runner, for comparison).
# For each mode: the wall time per shard (attempt duration) and the fixed cost per shard
# (attempt duration minus the time Data-Juicer spent on the rows: "All Ops are done in X s" in
# its log). Target: per-rank fixed cost <= 1/4 of per-attempt's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(bash "$repo/scripts/build.sh")
venv=${ESHARD_DJ_VENV:-$repo/.venv-dj}
bash "$repo/scripts/setup-dj-env.sh" "$venv" >/dev/null
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 UV_OFFLINE=1 RAY_DATA_DISABLE_PROGRESS_BARS=1
work=${ESHARD_BENCH_DIR:-/tmp/eshard-bench-ray}
rm -rf "$work"; mkdir -p "$work"
cd "$repo"
for mode in per-attempt per-rank per-rank-no-runner; do
  "$bin" prepare --config configs/demo.yaml --dataset-path configs/demo-data --job-dir "$work/$mode" \
    --num-shards 8 --python "$venv/bin/python" --dj-process "$venv/bin/dj-process" >/dev/null 2>&1
  start=$(date +%s.%N)
  case $mode in
    per-rank-no-runner) opts=(--ray-mode per-rank --no-dj-runner) ;;
    *) opts=(--ray-mode "$mode") ;;
  esac
  "$bin" worker --job-dir "$work/$mode" "${opts[@]}" >"$work/$mode.log" 2>&1
  end=$(date +%s.%N)
  echo "$mode: worker wall $(python3 -c "print(round($end - $start, 2))") s for 8 shards" >&2
done
python3 - "$work" <<'PY'
import glob, json, os, re, statistics, sys
work = sys.argv[1]
res = {}
for mode in ("per-attempt", "per-rank", "per-rank-no-runner"):
    walls, fixed, ops = [], [], []
    for a in glob.glob(os.path.join(work, mode, "attempts/*/*/attempt.json")):
        j = json.load(open(a))
        if j.get("status") != "done":
            continue
        log = open(os.path.join(os.path.dirname(a), "process.log"), errors="replace").read()
        m = re.findall(r"All Ops are done in ([0-9.]+)s", log)
        t = sum(map(float, m))
        walls.append(j["duration_secs"]); ops.append(t); fixed.append(j["duration_secs"] - t)
    res[mode] = (statistics.median(walls), statistics.median(ops), statistics.median(fixed), len(walls))
    print("%-12s shards %d: wall per shard median %.2f s, rows processing %.2f s, fixed cost %.2f s"
          % (mode, len(walls), *res[mode][:3]))
ratio = res["per-rank"][2] / res["per-attempt"][2]
print("per-rank fixed cost / per-attempt fixed cost = %.2f (target <= 0.25)" % ratio)
print("without the persistent runner (plain dj-process per shard against the head): %.2f"
      % (res["per-rank-no-runner"][2] / res["per-attempt"][2]))
PY
