#!/bin/bash
# Proof at scale (issue 11 item 6, issue 13 item 5): many workers on many tiny shards (`cp`).
#
#   tests/bench/scale.sh [--bin PATH] [--compare PATH] [--shards "2000 20000"] [--workers "16 32"]
#                        [--runs K] [--parts LIST] [--ops-shards N] [--idle-secs S] [--held N]
#                        [--idle-poll SECS|run]
#
# Parts (--parts, comma-separated; default all of them):
#   workers  W `eshard-mpi worker` processes started together on one prepared job, for every
#            shard count and worker count: wall time (start to the last exit), makespan (first
#            claim to last done record, from the attempts and done records) and aggregate
#            shards/s = shards / makespan; median of K runs (--runs, default 3).
#   mpirun   the same with one `mpirun -np W eshard-mpi run` on 4 fake hosts
#            (tests/e2e/fakehosts.sh); the wall time includes prepare and the merge.
#   ops      one workers run of --ops-shards shards (default 2000) per worker count under
#            `strace -f -y`: the file-system operations on the job folder per shard, by kind
#            (every one of them is a round trip on NFS), split into metadata and shard data,
#            and per claim: the workers' own operations on lock files (probes of other
#            workers' locks, lost creates, heartbeats, fences) per attempt.
#   idle     an idle worker (--poll-interval-secs 1, --no-backup) traced with `strace -c -f -p`
#            for --idle-secs (default 10) once it has printed that no claim is available, at
#            every shard count, in two states: every shard held by a live lock of another
#            worker, and the tail of a job (every shard done, its record and fence written by the
#            benchmark, but --held (default 16) held); per second and per poll. --idle-poll run
#            is an idle rank of `eshard-mpi run` other than rank 0: it polls every
#            max(1, shards / 2000) s, at most 20 s (its per-poll cost grows with the shards
#            held, its per-second cost stops growing at 2,000), and prints no progress lines
#            (rank 0's progress reads the whole job folder every --progress-secs);
#            --idle-poll SECS is a plain worker polling at that interval (default 1).
#   status   `eshard-mpi status` wall time on a finished job, median of 3, at every shard count.
#
# Exactly-once (tests/e2e/exactly_once.py --fence --uncounted) is checked after every run; a
# failed check stops the benchmark with exit 1. --bin measures another build (say, one from
# before a change) with the same jobs; --compare PATH times that build's `status` too, on the
# same finished job. The workers of the `workers` part poll every second
# (--poll-interval-secs 1) so that the wall time is not the default 20 s idle poll.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="" compare="" shards="2000 20000" workers="16 32" runs=3 parts="workers,mpirun,ops,idle,status"
ops_shards=2000 idle_secs=10 held=16 idle_poll=1
usage() {
  echo "usage: $0 [--bin PATH] [--compare PATH] [--shards LIST] [--workers LIST] [--runs K] [--parts LIST] [--ops-shards N] [--idle-secs S] [--held N] [--idle-poll SECS|run]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --bin) bin=$2 ;;
    --shards) shards=$2 ;;
    --workers) workers=$2 ;;
    --runs) runs=$2 ;;
    --parts) parts=$2 ;;
    --ops-shards) ops_shards=$2 ;;
    --idle-secs) idle_secs=$2 ;;
    --idle-poll) idle_poll=$2 ;;
    --held) held=$2 ;;
    --compare) compare=$2 ;;
    *) usage ;;
  esac
  shift 2
done
for v in $shards $workers $runs $ops_shards $idle_secs $held; do
  case $v in '' | *[!0-9]* | 0) echo "scale bench: '$v' is not a positive integer" >&2; exit 2 ;; esac
done
case $idle_poll in run | [1-9] | [1-9][0-9]) ;; *) echo "scale bench: --idle-poll must be 'run' or whole seconds, got '$idle_poll'" >&2; exit 2 ;; esac
want() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ -n "$bin" ] || bin=$(bash "$repo/scripts/build.sh")
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[ -x "$bin" ] || { echo "scale bench: no binary at $bin" >&2; exit 2; }
command -v strace >/dev/null || { echo "scale bench: needs strace" >&2; exit 2; }
T=$(mktemp -d /tmp/eshard-bench-scale.XXXXXX)
trap 'rm -rf "$T"' EXIT
SRC=$repo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
MPIRUN=${MPIEXEC:-mpirun}
fail() { echo "scale bench: $*" >&2; exit 1; }
printf 'executor_type: ray\nray_address: local\nprocess:\n  - whitespace_normalization_mapper:\n' >"$T/recipe.yaml"
CMD='cp {input} {output}'
echo "scale bench: binary $bin"

# input N: $T/in.N.jsonl with N rows (one row per shard).
input() {
  [ -f "$T/in.$1.jsonl" ] || python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "scale row %d" % i}) + "\n")' "$T/in.$1.jsonl" "$1"
}
# prepare N JOB
prepare() {
  input "$1"
  rm -rf "$2"
  "$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.$1.jsonl" --num-shards "$1" --job-dir "$2" \
    --process-cmd "$CMD" >"$T/prepare.out" 2>&1 || { cat "$T/prepare.out" >&2; fail "prepare of $1 shards failed"; }
}
check_once() {
  python3 "$repo/tests/e2e/exactly_once.py" "$1" --fence --uncounted >"$T/once.out" 2>&1 ||
    { head -20 "$T/once.out" >&2; fail "exactly-once does not hold in $1 ($2)"; }
}
# makespan JOB: "<makespan secs> <attempts> <hosts>" from the attempts and done records.
makespan() {
  python3 - "$1" <<'PY'
import datetime, glob, json, os, sys
job = sys.argv[1]
def t(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
claims = [t(json.load(open(p))["claimed_at"]) for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json"))]
recs = [json.load(open(p)) for p in glob.glob(os.path.join(job, "state", "done", "*.json"))]
print("%.3f %d %d" % (max(t(r["completed_at"]) for r in recs) - min(claims), len(claims), len({r["hostname"] for r in recs})))
PY
}
median() { python3 -c 'import statistics, sys; print("%.3f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
now() { date +%s.%N; }
# start_workers W JOB: W workers in the background; their pids in $T/pids.
start_workers() {
  : >"$T/pids"
  for _ in $(seq 1 "$1"); do
    "$bin" worker --job-dir "$2" --poll-interval-secs 1 >/dev/null 2>>"$T/workers.err" &
    echo $! >>"$T/pids"
  done
}
wait_workers() {
  local p rc=0
  for p in $(cat "$T/pids"); do wait "$p" || rc=$?; done
  [ "$rc" = 0 ] || { tail -5 "$T/workers.err" >&2; fail "a worker exited $rc"; }
}

# ---- throughput: W worker processes, or mpirun -np W on 4 fake hosts
workers_run() {  # N W JOB -> "wall makespan attempts hosts"
  prepare "$1" "$3"
  : >"$T/workers.err"
  local t0 t1
  t0=$(now)
  start_workers "$2" "$3"
  wait_workers
  t1=$(now)
  check_once "$3" "$1 shards, $2 workers"
  echo "$(python3 -c "print('%.3f' % ($t1 - $t0))") $(makespan "$3")"
}
last_job_n="" # the shard count of the finished, checked job left in $T/job by the last run
mpirun_run() {  # N W JOB -> "wall makespan attempts hosts"
  input "$1"
  rm -rf "$3"
  local t0 t1 rc=0
  t0=$(now)
  # shellcheck disable=SC2086
  timeout 1800 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np "$2" "$bin" run --config "$T/recipe.yaml" \
    --dataset-path "$T/in.$1.jsonl" --num-shards "$1" --job-dir "$3" --process-cmd "$CMD" \
    --output "$T/merged.jsonl" >"$T/mpirun.out" 2>&1 || rc=$?
  t1=$(now)
  [ "$rc" = 0 ] || { tail -20 "$T/mpirun.out" >&2; fail "mpirun -np $2 run of $1 shards exited $rc"; }
  grep -q '^PASS' "$T/mpirun.out" || { tail -20 "$T/mpirun.out" >&2; fail "mpirun -np $2 run of $1 shards: no PASS line"; }
  check_once "$3" "$1 shards, mpirun -np $2"
  echo "$(python3 -c "print('%.3f' % ($t1 - $t0))") $(makespan "$3")"
}
throughput() {  # MODE
  local mode=$1 n w r out walls spans
  for n in $shards; do
    for w in $workers; do
      walls="" spans=""
      for r in $(seq 1 "$runs"); do
        out=$("${mode}_run" "$n" "$w" "$T/job")
        last_job_n=$n
        # shellcheck disable=SC2086
        set -- $out
        echo "scale bench: $mode run $r: $n shards, $w workers: wall $1 s, makespan $2 s, $3 attempts, $4 host(s), exactly-once ok"
        walls="$walls $1" spans="$spans $2"
      done
      # shellcheck disable=SC2086
      local mw ms
      # shellcheck disable=SC2086
      mw=$(median $walls) ms=$(median $spans)
      echo "scale bench: $mode: $n shards, $w workers: median wall $mw s, median makespan $ms s:" \
        "$(python3 -c "print('%.0f shards/s (%.0f by wall)' % ($n / $ms, $n / $mw))")"
    done
  done
}
if want mpirun; then
  # shellcheck source=tests/e2e/fakehosts.sh disable=SC1091
  . "$repo/tests/e2e/fakehosts.sh"
  fakehosts_check() { :; }
  fakehosts_setup 4
fi
want workers && throughput workers
want mpirun && throughput mpirun

# ---- operations per shard and per claim, from a full trace of one workers run
ops() {  # N W
  local n=$1 w=$2 job=$T/ops-job
  prepare "$n" "$job"
  cat >"$T/launch.sh" <<EOF
#!/bin/bash
for _ in \$(seq 1 $w); do "$bin" worker --job-dir "$job" --poll-interval-secs 1 >/dev/null 2>&1 & done
wait
EOF
  chmod +x "$T/launch.sh"
  strace -f -y -qq -o "$T/trace" -e trace=%file,%desc,%process,fsync,fdatasync,flock,link,rename,unlink \
    -e signal=none "$T/launch.sh"
  check_once "$job" "$n shards, $w workers under strace"
  python3 - "$T/trace" "$job" "$n" "$w" <<'PY'
import glob, os, re, sys
trace, job, n, w = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
groups = {
    "open": ["openat", "open", "creat"],
    "stat": ["newfstatat", "statx", "stat", "lstat", "fstat", "access", "faccessat", "faccessat2", "readlink", "readlinkat"],
    "link": ["link", "linkat"], "rename": ["rename", "renameat", "renameat2"],
    "unlink": ["unlink", "unlinkat", "rmdir"], "mkdir": ["mkdir", "mkdirat"], "fsync": ["fsync", "fdatasync"],
    "flock": ["flock"], "read": ["read", "pread64"], "write": ["write", "pwrite64"],
    "readdir": ["getdents64", "getdents"], "close": ["close"],
    "setattr": ["ftruncate", "truncate", "utimensat", "futimens", "fchmod", "chmod"],
}
kind = {s: g for g, names in groups.items() for s in names}
line_re = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")
role = {}          # pid -> "worker" or "child"
workers_pids = set()
per = {}           # (who, group, meta/data) -> count
lock_ops = {}
claims = len(glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json")))
jobp = job + "/"
for line in open(trace, errors="replace"):
    m = line_re.match(line)
    if not m:
        continue
    pid, resumed, name, rest = int(m.group(1)), m.group(2), m.group(3), m.group(4)
    if resumed:
        # The result of a clone that was unfinished: the child inherits the parent's role.
        if resumed in ("clone", "clone3", "vfork", "fork"):
            r = re.search(r"= (\d+)\s*$", rest)
            if r:
                role[int(r.group(1))] = role.get(pid, "other")
        continue
    if name in ("clone", "clone3", "vfork", "fork"):
        r = re.search(r"= (\d+)\s*$", rest)
        if r:
            role[int(r.group(1))] = role.get(pid, "other")
        continue
    if name == "execve":
        prog = re.match(r'\s*"([^"]*)"', rest)
        if prog and "= -1" not in rest:  # not a failed try of a PATH search
            p = os.path.basename(prog.group(1))
            if p == "eshard-mpi":
                role[pid] = "supervisor" if '"__supervise"' in rest else "worker"
            else:
                role[pid] = "launcher" if p == "launch.sh" else "child"
        continue
    g = kind.get(name)
    if not g or jobp not in rest:
        continue
    who = role.get(pid, "other")
    if who == "launcher":
        continue
    path = rest
    data = ".jsonl" in path and g in ("read", "write")
    key = (who, g, "data" if data else "meta")
    per[key] = per.get(key, 0) + 1
    if who == "worker" and "/state/locks/" in rest:
        lock_ops[g] = lock_ops.get(g, 0) + 1
def show(filt):
    parts, tot = [], 0
    for g in groups:
        c = sum(v for (who, gg, dm), v in per.items() if gg == g and filt(who, dm))
        tot += c
        if c:
            parts.append("%s=%.2f" % (g, c / n))
    return " ".join(parts), tot / n
for label, filt in [("all processes, metadata", lambda who, dm: dm == "meta"),
                    ("all processes, shard data", lambda who, dm: dm == "data"),
                    ("workers alone, metadata", lambda who, dm: who == "worker" and dm == "meta"),
                    ("supervisors and processors", lambda who, dm: who != "worker")]:
    s, tot = show(filt)
    print("scale bench: ops: %d shards, %d workers, %s per shard: %s; total %.2f" % (n, w, label, s, tot))
lt = sum(lock_ops.values())
print("scale bench: ops: %d shards, %d workers, lock-file operations of the workers per claim (%d claims): %s; total %.2f"
      % (n, w, claims, " ".join("%s=%.2f" % (g, lock_ops[g] / max(claims, 1)) for g in groups if g in lock_ops),
         lt / max(claims, 1)))
PY
  rm -f "$T/trace"
}
if want ops; then
  for w in $workers; do ops "$ops_shards" "$w"; done
fi

# ---- an idle worker: every shard held, and the tail of a finished job
# hold JOB IDS...: a live running lock of another worker (lease one hour) on each shard named
# (all of them when none is named); the shard's done record goes (the shard is running again).
hold() {
  python3 - "$@" <<'PY'
import datetime, json, os, secrets, sys, time
job, ids = sys.argv[1], sys.argv[2:]
if not ids:
    ids = [s["id"] for s in json.load(open(os.path.join(job, "manifest.json")))["shards"]]
now = time.time()
iso = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat()
for sid in ids:
    tok = secrets.token_hex(16)
    lock = {"attempt_dir": "attempts/%s/0009-%s" % (sid, tok), "attempt_number": 9, "claimed_at": iso,
            "claimed_at_epoch": now, "heartbeat": 0, "hostname": "bench-holder", "lease_secs": 3600.0,
            "pid": 1, "shard_id": sid, "status": "running", "token": tok}
    p = os.path.join(job, "state", "locks", sid + ".lock")
    with open(p + ".tmp", "w") as f:
        f.write(json.dumps(lock, sort_keys=True, separators=(",", ":")))
    os.replace(p + ".tmp", p)
    try:
        os.unlink(os.path.join(job, "state", "done", sid + ".json"))
    except FileNotFoundError:
        pass
PY
}
# finish_all JOB: a done record and its done fence for every shard, as a worker leaves them
# (tests/bench/finish_job.py; no result files).
finish_all() { python3 "$repo/tests/bench/finish_job.py" "$1"; }
# idle_ops N JOB LABEL: trace an idle worker of JOB for idle_secs once it waits.
idle_ops() {
  local n=$1 job=$2 label=$3 pid i
  local poll=$idle_poll progress=()
  if [ "$poll" = run ]; then
    poll=$(python3 -c "print(int(min(20, max(1, $n / 2000))))")
    progress=(--progress-secs 0)
  fi
  "$bin" worker --job-dir "$job" --poll-interval-secs "$poll" "${progress[@]}" --no-backup --lease-secs 3600 >"$T/idle.out" 2>&1 &
  pid=$!
  for i in $(seq 1 1200); do
    grep -q 'No shard claim available' "$T/idle.out" && break
    kill -0 "$pid" 2>/dev/null || { cat "$T/idle.out" >&2; fail "the idle worker exited"; }
    sleep 0.1
  done
  grep -q 'No shard claim available' "$T/idle.out" || fail "the idle worker never went idle"
  local polls0 polls1
  polls0=$(grep -c 'No shard claim available' "$T/idle.out")
  timeout -s INT "$idle_secs" strace -qq -c -f -p "$pid" -o "$T/idle.strace" || true
  polls1=$(grep -c 'No shard claim available' "$T/idle.out")
  kill -TERM "$pid"
  wait "$pid" || true
  grep -q '^Claimed' "$T/idle.out" && fail "the idle worker claimed a shard"
  python3 - "$T/idle.strace" "$n" "$label" "$idle_secs" $((polls1 - polls0)) <<'PY'
import re, sys
path, n, label, secs, polls = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
calls = {}
for line in open(path):
    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
    if m:
        calls[m.group(2)] = int(m.group(1))
groups = {
    "open": ["openat", "open"], "stat": ["newfstatat", "statx", "stat", "lstat", "fstat", "access"],
    "read": ["read", "pread64"], "write": ["write", "pwrite64"], "readdir": ["getdents64"],
    "flock": ["flock"], "close": ["close"], "fsync": ["fsync", "fdatasync"],
    "link": ["link", "linkat"], "rename": ["rename", "renameat", "renameat2"], "unlink": ["unlink", "unlinkat"],
}
parts, tot = [], 0
for g, names in groups.items():
    c = sum(calls.get(x, 0) for x in names)
    tot += c
    if c:
        parts.append("%s=%.1f" % (g, c / secs))
print("scale bench: idle: %d shards, %s: %s; total %.1f file-system operations per second, %.0f per poll (%d polls)"
      % (n, label, " ".join(parts), tot / secs, tot / max(polls, 1), polls))
PY
}
if want idle; then
  for n in $shards; do
    prepare "$n" "$T/idle-job"
    hold "$T/idle-job"
    idle_ops "$n" "$T/idle-job" "every shard held"
    # The tail: every shard done (a done record and its fence, written here: an idle worker
    # reads no more of them than that) but the first --held, which are held.
    prepare "$n" "$T/idle-job"
    finish_all "$T/idle-job"
    # shellcheck disable=SC2046
    hold "$T/idle-job" $(python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(open(sys.argv[1]))["shards"][:int(sys.argv[2])]))' \
      "$T/idle-job/manifest.json" "$held")
    idle_ops "$n" "$T/idle-job" "the tail: all done but $held held"
  done
fi

# ---- status time on a finished job
if want status; then
  for n in $shards; do
    if [ "$last_job_n" = "$n" ]; then
      mv "$T/job" "$T/status-job" # the last workers run's job, finished and checked
    else
      prepare "$n" "$T/status-job"
      : >"$T/workers.err"
      start_workers "$(echo "$workers" | awk '{print $1}')" "$T/status-job"
      wait_workers
      check_once "$T/status-job" "$n shards, for status"
    fi
    for b in "$bin" $compare; do
      times=""
      for _ in 1 2 3; do
        t0=$(now)
        "$b" status --job-dir "$T/status-job" >"$T/status.out" 2>&1 || fail "status of a finished job exited $?"
        t1=$(now)
        times="$times $(python3 -c "print($t1 - $t0)")"
      done
      # shellcheck disable=SC2086
      echo "scale bench: status: $n shards done, $b: median $(median $times) s of 3 (runs:$(printf ' %.3f' $times))"
    done
  done
fi
