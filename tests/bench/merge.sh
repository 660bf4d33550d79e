#!/bin/bash
# Merge benchmark: a 100 MB corpus prepared into 16 shards, each "processed" by a plain copy,
# then `eshard-mpi merge --overwrite` timed 5 times; prints every wall time and the median.
# Target (2-core machine): median <= 0.3 s. Set ESHARD_BENCH_FAIL=1 to exit 1 above target.
#
# usage: tests/bench/merge.sh [path/to/eshard-mpi] [size_mb]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BIN=${1:-${ESHARD_BIN:-$SRC/build/eshard-mpi}}
SIZE_MB=${2:-100}
TARGET=${ESHARD_BENCH_TARGET:-0.3}
[ -x "$BIN" ] || { echo "eshard-mpi binary not found: $BIN (build first or pass its path)" >&2; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/eshard-bench-merge.XXXXXX")
trap 'rm -rf "$T"' EXIT

python3 "$HERE/gen_corpus.py" "$T/corpus.jsonl" "$SIZE_MB" >/dev/null
cat >"$T/recipe.yaml" <<'YAML'
executor_type: ray
ray_address: local
process:
  - whitespace_normalization_mapper: {}
YAML
"$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/corpus.jsonl" --job-dir "$T/job" \
  --num-shards 16 >/dev/null 2>"$T/prepare.err" || { cat "$T/prepare.err" >&2; exit 2; }

# Done records that point at copies of the shards, as if each shard had been processed by `cp`.
python3 - "$T/job" <<'PY'
import hashlib, json, os, sys, time, uuid
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
for sh in m["shards"]:
    sid, tok = sh["id"], uuid.uuid4().hex
    rel = "attempts/%s/0001-%s" % (sid, tok)
    os.makedirs(os.path.join(job, rel))
    data = open(os.path.join(job, sh["path"]), "rb").read()
    with open(os.path.join(job, rel, "processed.jsonl"), "wb") as f:
        f.write(data)
    now = time.time()
    rec = {"attempt_number": 1, "completed_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now)),
           "data_juicer_commit": "unknown", "executor_type": "ray", "hostname": "bench-node",
           "output_path": rel + "/processed.jsonl", "pid": os.getpid(), "ray_address": "local",
           "ray_output_files": [], "rows": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest(),
           "shard_id": sid, "size_bytes": len(data), "status": "done", "token": tok}
    with open(os.path.join(job, "state", "done", sid + ".json"), "w") as f:
        json.dump(rec, f, indent=2, sort_keys=True)
        f.write("\n")
PY

bytes=$(stat -c %s "$T/corpus.jsonl")
times=()
for i in 1 2 3 4 5; do
  s=$(date +%s.%N)
  "$BIN" merge --job-dir "$T/job" --output "$T/merged.jsonl" --overwrite >"$T/merge.out"
  e=$(date +%s.%N)
  times+=("$(python3 -c "print('%.3f' % ($e - $s))")")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["normalized_sha256"])' "$T/job/manifest.json")
got=$(sha256sum "$T/merged.jsonl" | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "merged output differs from the concatenated shards" >&2; exit 1; }
echo "merge bench: $(cat "$T/merge.out")"
echo "merge bench: input $bytes bytes, 16 shards; wall times ${times[*]} s; median $median s (target <= $TARGET s)"
# Other work on the machine shows up in the wall times; the load average tells how much.
echo "merge bench: load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
python3 -c "import sys; sys.exit(0 if float('$median') <= float('$TARGET') else 1)" || {
  echo "merge bench: median above target" >&2
  [ -z "${ESHARD_BENCH_FAIL:-}" ] || exit 1
}
