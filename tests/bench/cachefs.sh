#!/bin/bash
# Attempts per shard on a shared file system that caches like an NFS client: 4 workers, each
# through its own caching mount (tests/e2e/cachefs.py), 40 shards of 0.3 s, caches of 3 s and
# 30 s, one worker SIGKILLed mid-run (--kill) or none. Prints attempts, shards, takeovers and
# superseded attempts (a superseded attempt ran a whole shard again for nothing).
#
#   tests/bench/cachefs.sh [--bin PATH] [--kill] [--runs N]
#
# --bin compares another build (say, one from before terminal fences).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="" kill=0 runs=1
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --kill) kill=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--kill] [--runs N]" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || bin=$(bash "$repo/scripts/build.sh")
[ -c /dev/fuse ] && /usr/bin/python3 -c 'import fusepy' || { echo "needs /dev/fuse and python3-fusepy" >&2; exit 2; }
T=$(mktemp -d /tmp/eshard-bench-cachefs.XXXXXX)
trap 'rm -rf "$T"' EXIT
RUN=$repo/tests/e2e/cachefs-run.sh
printf 'executor_type: ray\nray_address: local\nprocess:\n  - whitespace_normalization_mapper:\n' >"$T/recipe.yaml"
python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"id": i, "text": "cached row %d " % i}) + "\n")' "$T/in.jsonl"
printf '#!/bin/sh\nsleep 0.3\ncp "$1" "$2"\n' >"$T/proc.sh"
chmod +x "$T/proc.sh"
for secs in 3 30; do
  for r in $(seq 1 "$runs"); do
    B=$T/back$secs.$r M=$T/mnt$secs.$r
    mkdir -p "$B" "$M"
    "$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 40 --job-dir "$B/job" \
      --process-cmd "$T/proc.sh {input} {output}" --lease-secs 4 --heartbeat-secs 1 >/dev/null 2>&1
    pids=()
    t0=$(date +%s.%N)
    for w in 1 2 3 4; do
      "$RUN" "$B" "$M" "$secs" "$T/w$w.pid" "$bin" worker --job-dir "$M/job" --poll-interval-secs 1 >"$T/w$w.out" 2>&1 &
      pids+=($!)
    done
    if [ "$kill" = 1 ]; then
      for _ in $(seq 200); do grep -q '^Claimed' "$T/w2.out" 2>/dev/null && break; sleep 0.1; done
      sleep 0.5
      kill -KILL "$(cat "$T/w2.pid")"
    fi
    for p in "${pids[@]}"; do wait "$p" || true; done
    t1=$(date +%s.%N)
    python3 - "$B/job" "$secs" "$t0" "$t1" <<'PY'
import glob, json, os, sys
job, secs, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
att = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json"))]
shards = len(json.load(open(os.path.join(job, "manifest.json")))["shards"])
print("cachefs bench: cache %ss: attempts=%d shards=%d takeovers=%d superseded=%d done=%d wall=%.1fs" % (
    secs, len(att), shards, len(os.listdir(os.path.join(job, "state", "stale_locks"))),
    sum(a.get("status") == "superseded" for a in att), len(os.listdir(os.path.join(job, "state", "done"))), t1 - t0))
PY
  done
done
