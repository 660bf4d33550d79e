#!/bin/bash
# File-system operations per shard, by kind, of one worker running N tiny shards (`cp`), from
# `strace -c -f` of the worker and its children, divided by N: every one of them is a network
# round trip on NFS. Also the claim alone: the worker's own operations per claimed shard
# (without its supervisor and processor).
#
#   tests/bench/scale.sh [--bin PATH] [--shards N]
#
# --bin measures another build (say, one from before a change) with the same job.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="" n=200
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --shards) n=$2; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--shards N]" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || bin=$(bash "$repo/scripts/build.sh")
command -v strace >/dev/null || { echo "scale bench: needs strace" >&2; exit 2; }
T=$(mktemp -d /tmp/eshard-bench-scale.XXXXXX)
trap 'rm -rf "$T"' EXIT
printf 'executor_type: ray\nray_address: local\nprocess:\n  - whitespace_normalization_mapper:\n' >"$T/recipe.yaml"
python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "scale row %d" % i}) + "\n")' "$T/in.jsonl" "$n"

# ops JOB STRACE_ARGS...: run one worker on a fresh job under strace; print per-shard counts.
ops() {
  local label=$1; shift
  rm -rf "$T/job"
  "$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards "$n" --job-dir "$T/job" \
    --process-cmd 'cp {input} {output}' >/dev/null 2>&1
  strace -qq -c -o "$T/strace.txt" "$@" -e trace=%file,%desc,fsync,flock,link,rename,unlink \
    "$bin" worker --job-dir "$T/job" >/dev/null 2>&1
  python3 - "$T/strace.txt" "$n" "$label" <<'PY'
import re, sys
path, n, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
calls = {}
for line in open(path):
    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
    if m:
        calls[m.group(2)] = int(m.group(1))
groups = {
    "open": ["openat", "open", "creat"],
    "stat": ["newfstatat", "statx", "stat", "lstat", "fstat", "access", "faccessat", "faccessat2", "readlink"],
    "link": ["link", "linkat"], "rename": ["rename", "renameat", "renameat2"],
    "unlink": ["unlink", "unlinkat"], "mkdir": ["mkdir", "mkdirat"], "fsync": ["fsync", "fdatasync"],
    "flock": ["flock"], "read": ["read", "pread64"], "write": ["write", "pwrite64"],
    "readdir": ["getdents64", "getdents"],
}
tot = 0
parts = []
for g, names in groups.items():
    c = sum(calls.get(x, 0) for x in names)
    tot += c
    parts.append("%s=%.1f" % (g, c / n))
print("scale bench: %s, %d shards: %s; total %.1f per shard" % (label, n, " ".join(parts), tot / n))
PY
}
ops "worker + children" -f
ops "the worker alone (claims, records, heartbeats)"
