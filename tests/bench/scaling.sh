#!/bin/bash
# Scaling benchmark of 'eshard-mpi run': 4 ranks on 4 fake hosts (tests/e2e/fakehosts.sh), 32
# shards, a processor whose run time is proportional to its shard's bytes (it sleeps
# bytes/rate seconds), and one host (node4) twice as slow. Sleeping processors do not compete
# for the 2 cores of the test machine, so this measures the scheduling (claims, polling,
# hand-offs), not the CPU.
#
# For each of 3 runs it prints the makespan (first claim to last done record, from the event
# logs), the mpirun wall time, the ideal bound max(total work / total speed, longest shard)
# and their ratio, the shards per host, and the spread of the ranks' first claims as printed
# by rank 0, and what a scheduler without overhead reaches with whole shards; then the medians. Targets: makespan <= 1.15 x bound, first-claim spread <= 0.5 s.
# The launch overhead (mpirun wall - makespan; target <= 1.5 s) is split into: mpirun start to
# the manifest's creation (launch, MPI_Init, prepare), manifest to first claim (the hand-off),
# last done record to the merged output's last write (verify and the merge's tail), and from
# there to mpirun's exit (report, summary, MPI_Finalize, teardown); each run is paired with
# `mpirun -np 4 true` on the same fake hosts, the launcher's own floor.
# Set ESHARD_BENCH_FAIL=1 to exit 1 when a median misses its target.
#
# usage: tests/bench/scaling.sh [path/to/eshard-mpi]
#   ESHARD_BENCH_RUNS (3), ESHARD_BENCH_SHARD_SECS (2.5: seconds of one average shard on a fast
#   host; the job takes about 10x that), MPIEXEC (mpirun)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BIN=${1:-${ESHARD_BIN:-$SRC/build/eshard-mpi}}
RUNS=${ESHARD_BENCH_RUNS:-3}
SHARD_SECS=${ESHARD_BENCH_SHARD_SECS:-2.5}
MPIRUN=${MPIEXEC:-mpirun}
SHARDS=32
[ -x "$BIN" ] || { echo "eshard-mpi binary not found: $BIN (build first or pass its path)" >&2; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/eshard-bench-scaling.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "ERROR: $*" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# shellcheck source=tests/e2e/fakehosts.sh disable=SC1091
. "$SRC/tests/e2e/fakehosts.sh"
fakehosts_check
fakehosts_setup 4

# About 2 MB of rows of varied length.
python3 - "$T/in.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(8000):
        f.write(json.dumps({"id": i, "text": "w" * r.randint(20, 480)}) + "\n")
PY
cat >"$T/recipe.yaml" <<'YAML'
process:
  - whitespace_normalization_mapper: {}
YAML
# The rate that makes an average shard last SHARD_SECS on a fast host.
total=$(python3 -c 'import os,sys; print(os.path.getsize(sys.argv[1]))' "$T/in.jsonl")
RATE=$(python3 -c "print($total / ($SHARDS * $SHARD_SECS))")
cat >"$T/proc.sh" <<EOF
#!/bin/sh
# Run time proportional to the shard's bytes; node4 is twice as slow.
b=\$(stat -c %s "\$1")
s=\$(awk -v b="\$b" -v r="$RATE" -v h="\$(hostname)" 'BEGIN { t = b / r; if (h == "node4") t *= 2; printf "%.3f", t }')
sleep "\$s"
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"

echo "scaling: 4 ranks on node1..node4 (node4 2x slower), $SHARDS shards, ~${SHARD_SECS}s per shard on a fast host, $RUNS runs"
: >"$T/results"
for run in $(seq 1 "$RUNS"); do
  J=$T/job$run
  l0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout 120 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 true || fail "mpirun -np 4 true failed"
  l1=$(date +%s.%N)
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! timeout 300 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$BIN" run --config "$T/recipe.yaml" \
      --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards "$SHARDS" \
      --process-cmd "$T/proc.sh {input} {output}" >"$T/out$run" 2>"$T/err$run"; then
    cat "$T/err$run" >&2
    fail "run $run failed"
  fi
  t1=$(date +%s.%N)
  spread=$(sed -n 's/^First claims of the ranks were \([0-9.]*\) s apart$/\1/p' "$T/out$run")
  [ -n "$spread" ] || fail "run $run printed no first-claim spread"
  python3 - "$J" "$RATE" "$t0" "$t1" "$spread" "$run" "$l0" "$l1" >>"$T/results" <<'PY'
import datetime, glob, json, os, sys
job, rate, t0, t1, spread, run = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
launcher = float(sys.argv[8]) - float(sys.argv[7])
m = json.load(open(os.path.join(job, "manifest.json")))
sizes = [os.path.getsize(os.path.join(job, s["path"])) for s in m["shards"]]
work = sum(sizes) / rate                     # seconds at speed 1
speed = 3 * 1.0 + 0.5                        # node1-3 at 1, node4 at 1/2
bound = max(work / speed, max(sizes) / rate)
claims, dones = [], []
for p in glob.glob(os.path.join(job, "state", "events", "*.jsonl")):
    for line in open(p):
        e = json.loads(line)
        if e.get("event") == "claim":
            claims.append(e["time"])
        elif e.get("event") == "done":
            dones.append(e["time"])
makespan = max(dones) - min(claims)
created = datetime.datetime.fromisoformat(m["created_at"]).timestamp()
merged = os.path.getmtime(os.path.join(job, "merged.jsonl"))
phases = (created - t0, min(claims) - created, merged - max(dones), t1 - merged)
hosts = {}
for p in glob.glob(os.path.join(job, "state", "done", "*.json")):
    h = json.load(open(p))["hostname"]
    hosts[h] = hosts.get(h, 0) + 1
per_host = " ".join("%s=%d" % (h, hosts[h]) for h in sorted(hosts))
# What a dynamic scheduler without any overhead reaches with whole shards: each free host takes
# the next shard in manifest order (the bound above ignores that shards are indivisible).
free = [0.0, 0.0, 0.0, 0.0]
times = [1.0, 1.0, 1.0, 2.0]
for b in sizes:
    k = min(range(4), key=lambda i: (free[i], i))
    free[k] += b / rate * times[k]
greedy = max(free)
print("%s %.3f %.3f %.3f %.4f %.3f %.3f %.3f %.3f %.3f %.3f %.3f %s" % ((run, makespan, t1 - t0, bound, makespan / bound, spread, greedy, launcher) + phases + (per_host,)))
PY
  read -r _ mk wall bound ratio sp greedy launcher p1 p2 p3 p4 hosts < <(tail -1 "$T/results")
  echo "run $run: makespan ${mk}s (mpirun wall ${wall}s), bound ${bound}s, ratio ${ratio}, first claims ${sp}s apart;" \
    "zero-overhead whole-shard schedule ${greedy}s; shards: $hosts"
  echo "  overhead $(python3 -c "print('%.3f' % ($wall - $mk))")s: start to manifest ${p1}s, manifest to first claim ${p2}s," \
    "last done to merged ${p3}s, merged to exit ${p4}s; mpirun -np 4 true ${launcher}s"
done

python3 - "$T/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = lambda i: statistics.median(float(r[i]) for r in rows)
mk, wall, bound, ratio, spread, greedy = med(1), med(2), med(3), med(4), med(5), med(6)
over = statistics.median(float(r[2]) - float(r[1]) for r in rows)
print("launch overhead (mpirun wall - makespan): median %.2f s (target <= 1.5: %s); start to manifest %.2f s, "
      "manifest to first claim %.2f s, last done to merged %.2f s, merged to exit %.2f s; mpirun -np 4 true %.2f s"
      % (over, "met" if over <= 1.5 else "MISSED", med(8), med(9), med(10), med(11), med(7)))
ok_ratio, ok_spread = ratio <= 1.15, spread <= 0.5
print("median of %d: makespan %.2f s, mpirun wall %.2f s, ideal bound %.2f s, makespan/bound %.3f (target <= 1.15: %s), "
      "first-claim spread %.3f s (target <= 0.5: %s)" % (len(rows), mk, wall, bound, ratio, "met" if ok_ratio else "MISSED",
                                                       spread, "met" if ok_spread else "MISSED"))
print("  (with whole shards, a scheduler without overhead needs %.2f s = %.3f x bound: eshard-mpi adds %.1f%%)"
      % (greedy, greedy / bound, 100 * (mk / greedy - 1)))
open(sys.argv[1] + ".ok", "w").write("1" if ok_ratio and ok_spread else "0")
PY
if [ "${ESHARD_BENCH_FAIL:-0}" = 1 ] && [ "$(cat "$T/results.ok")" != 1 ]; then exit 1; fi
