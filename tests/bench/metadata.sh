#!/bin/bash
# File operations on the shared file system, counted by its server (issue 29): `eshard-mpi run`
# on fake hosts whose job folder is each host's own GlusterFS client mount, and the brick's own
# per-fop counts (`gluster volume profile VOL info cumulative`).
#
#   tests/bench/metadata.sh [--bin PATH] [--configs "RxN ..."] [--status-shards "N ..."]
#                           [--sleep SECS] [--window SECS] [--partial K] [--status-runs K]
#                           [--compare-bin PATH] [--run-args "ARGS"]
#
# The volume is the one of tests/e2e/gluster.sh, sourced as it is: glusterd on this machine, a
# one-brick volume with the metadata-cache and nl-cache option groups (md-cache and the
# negative-lookup cache, 600 s), one FUSE client per fake host (tests/e2e/fakehosts.sh) in its
# own mount namespace. It needs root, glusterd, FUSE and unshare, as the dfs tests do.
#
# Every configuration R x N (--configs or ESHARD_BENCH_CONFIGS, default "8x400"; the issue's
# are R in 8 16 64 128 and N in 400 2000 20000) is a job of N + 1 shards of one row each: N
# run a processor that sleeps --sleep seconds (default 0.2) and copies its input, and one, the
# first shard claimed on the last host, waits until the benchmark lets it go (the issue's "one
# shard of 40 s", held as long as the measurement needs). It prints:
#   prepare      `eshard-mpi prepare` of the job through one client, counted apart: the run
#                that follows resumes the prepared job (same options), so its figures start
#                after prepare;
#   job          every operation of `run` (from mpirun's start to its end) but the tail held
#                open for the measurement, per shard (N + 1 shards); and the issue's job, whose
#                long shard takes 40 s: that plus what is left of the 40 s once the rest is
#                done, at the tail's first rate (J, and rank 0's D - Z); then that figure
#                split in two: up to the tail, and the job's end from the long shard's
#                release (its finish, rank 0's verify, merge and report);
#   tail         once every shard but the long one is done, six windows of --window seconds
#                (default 20, two of rank 0's progress periods), the ranks stopped with
#                SIGSTOP and let go with SIGCONT (their clients go on): J every rank but rank
#                0, from the tail's start, for twice --window; I one idle rank and the long
#                shard's; H the long shard's rank alone; Z every rank stopped (what is left:
#                the long shard's supervisor, the clients themselves); D rank 0 alone; A every
#                rank. An idle rank is neither rank 0 nor the long shard's (R - 2 of them).
#                Attributed: an idle rank = (J - H) / (R - 2) in the tail's first seconds (it
#                reads again what the last shards changed), then I - H measured alone; both
#                count what it reads again after each heartbeat of the long shard. Rank 0
#                following (progress lines and merge-follow) = D - Z with its own idle worker
#                loop, and without it; D is where rank 0 catches up with the shards that
#                finished after its last progress line before its stop (read from that line):
#                its requests per such shard, against the issue's 5 per finished shard and
#                10 a second; the long shard's rank = H - Z. That rank stays stopped
#                for Z and D only, less than its lease; every rank runs again before the long
#                shard ends;
#   status       `eshard-mpi status` wall time on the finished job from a new client mount,
#                median of --status-runs (default 3; the first is cold, the next ones find the
#                client's caches warm).
# --status-shards "20000 100000" (or ESHARD_BENCH_STATUS_SHARDS): for each N a job of N one-row
# shards (cp) is prepared through one client (its operations and time printed), then `status`
# is timed (the same way) before any work, after one `worker --max-shards K` (--partial,
# default 200) finished K shards, and once the rest is made finished through one client
# (tests/bench/finish_job.py --results --events: what status reads most, every shard's record,
# attempt folder and result, and the claim and done events a worker writes). On the way, with
# all but 41 shards finished, a kept view follows the job as rank 0's progress line does
# (`status --watch --interval 10` through a client of its own): its requests a second while
# nothing changes (2 x --window), then its requests to catch up with 40 shards finished while
# it was stopped (--window), against the issue's rank 0 following (5 per finished shard + 10 a
# second); then the last shard is finished, and the watch must end (its end, a listing of what
# changed, is not in the figure: rank 0's progress line has none).
# --compare-bin PATH (or ESHARD_BENCH_COMPARE_BIN): every `status` figure is taken a second time
# with that binary (another build, say the one before a change), on the same job right after,
# each through a new client of its own: a pair from one run, on the same machine load.
#
# --run-args "ARGS" (or ESHARD_BENCH_RUN_ARGS): more options for every `run`, split at blanks (say
# "--lease-secs 3600", to see what the passes of every quarter lease cost).
#
# Every run checks exactly-once on the brick (tests/e2e/exactly_once.py --fence). Each window's
# rate is its count over the wall time between the two profile reads (about 0.2 s of error
# each). The brick's counts include RELEASE and RELEASEDIR (the close of a file and of a folder
# are requests to the server too); each figure is followed by its largest fops.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="" configs=${ESHARD_BENCH_CONFIGS:-8x400} status_shards=${ESHARD_BENCH_STATUS_SHARDS:-} sleep_secs=0.2 window=20 partial=200 status_runs=3
compare_bin=${ESHARD_BENCH_COMPARE_BIN:-} run_args=${ESHARD_BENCH_RUN_ARGS:-}
usage() {
  echo "usage: $0 [--bin PATH] [--configs \"RxN ...\"] [--status-shards \"N ...\"] [--sleep SECS] [--window SECS] [--partial K] [--status-runs K] [--compare-bin PATH] [--run-args \"ARGS\"]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --bin) bin=$2 ;;
    --configs) configs=$2 ;;
    --status-shards) status_shards=$2 ;;
    --sleep) sleep_secs=$2 ;;
    --window) window=$2 ;;
    --partial) partial=$2 ;;
    --status-runs) status_runs=$2 ;;
    --compare-bin) compare_bin=$2 ;;
    --run-args) run_args=$2 ;;
    *) usage ;;
  esac
  shift 2
done
maxr=0
for c in $configs; do
  case $c in
    [1-9]*x[1-9]*) r=${c%x*} n=${c#*x} ;;
    *) echo "metadata bench: a configuration is RANKSxSHARDS, got '$c'" >&2; exit 2 ;;
  esac
  case $r$n in *[!0-9]*) echo "metadata bench: a configuration is RANKSxSHARDS, got '$c'" >&2; exit 2 ;; esac
  [ "$r" -ge 3 ] || { echo "metadata bench: $c: at least 3 ranks (rank 0, the long shard's, an idle one)" >&2; exit 2; }
  [ "$r" -le "$maxr" ] || maxr=$r
done
for v in $status_shards $window $partial $status_runs; do
  case $v in '' | *[!0-9]* | 0) echo "metadata bench: '$v' is not a positive integer" >&2; exit 2 ;; esac
done
# The long shard's rank stays stopped for two windows: less than its lease (120 s).
[ "$window" -le 40 ] || { echo "metadata bench: --window is at most 40 s" >&2; exit 2; }
case $sleep_secs in '' | *[!0-9.]*) echo "metadata bench: --sleep takes seconds, got '$sleep_secs'" >&2; exit 2 ;; esac
[ -n "$bin" ] || bin=$(bash "$repo/scripts/build.sh")
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[ -x "$bin" ] || { echo "metadata bench: no binary at $bin" >&2; exit 2; }
if [ -n "$compare_bin" ]; then
  compare_bin=$(cd "$(dirname "$compare_bin")" && pwd)/$(basename "$compare_bin")
  [ -x "$compare_bin" ] || { echo "metadata bench: no binary at $compare_bin" >&2; exit 2; }
fi

# The e2e helpers as they are: $T (removed at exit), fail, the fake hosts and the volume.
export ESHARD_BIN=$bin ESHARD_SOURCE_DIR=$repo
# shellcheck source=tests/e2e/lib.sh disable=SC1091
. "$repo/tests/e2e/lib.sh"
# shellcheck source=tests/e2e/ranks.sh disable=SC1091
. "$repo/tests/e2e/ranks.sh"
# shellcheck source=tests/e2e/fakehosts.sh disable=SC1091
. "$repo/tests/e2e/fakehosts.sh"
# shellcheck source=tests/e2e/gluster.sh disable=SC1091
. "$repo/tests/e2e/gluster.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
say() { echo "metadata bench: $*"; }
ranks_setup
fakehosts_check
[ "$maxr" -gt 0 ] && fakehosts_setup "$maxr"
gluster_setup
gluster_cli volume profile "$GLUSTER_VOL" start >/dev/null || fail "gluster volume profile $GLUSTER_VOL start failed"
write_recipe "$T/recipe.yaml"
say "binary $bin${compare_bin:+ (status also with $compare_bin)}${run_args:+, run $run_args}, volume $GLUSTER_VOL (metadata-cache, nl-cache), glusterfs $(glusterfs --version | awk 'NR == 1 { print $2 }')"

# snap FILE: the brick's cumulative calls per fop ("FOP CALLS" lines) and the time read.
snap() {
  local out
  out=$(gluster_cli volume profile "$GLUSTER_VOL" info cumulative) || fail "gluster volume profile info failed: $out"
  echo "$out" >"$1.raw"
  {
    echo "TIME $(now)"
    # A fop's line: %-latency, three latencies with their unit, calls, fop. UPCALL and CI_*
    # (cache invalidations the server sends to the clients) are kept apart.
    awk 'NF == 9 && $3 ~ /^[mun]?s$/ && $8 ~ /^[0-9]+$/ { f = $9; if (f == "UPCALL" || f ~ /^CI_/) f = "up:" f; c[f] += $8 }
      END { for (f in c) print f, c[f] }' <<<"$out"
  } >"$1"
}
# ops FROM TO [FROM2 TO2] [DIV]: a python helper prints the operations between two snapshots
# (minus those between FROM2 and TO2, when given), as "TOTAL SECS fop=count ..." over DIV.
ops() {
  python3 - "$@" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d[k] = float(v)
    return d
a = sys.argv[1:]
div = float(a.pop()) if len(a) in (3, 5) else 1.0
def diff(x, y):
    x, y = load(x), load(y)
    return {k: y.get(k, 0) - x.get(k, 0) for k in set(x) | set(y)}
d = diff(a[0], a[1])
if len(a) == 4:
    e = diff(a[2], a[3])
    d = {k: d.get(k, 0) - e.get(k, 0) for k in set(d) | set(e)}
secs = d.pop("TIME")
up = sum(v for k, v in d.items() if k.startswith("up:"))
d = {k: v for k, v in d.items() if not k.startswith("up:")}
tot = sum(d.values())
top = sorted(((v, k) for k, v in d.items() if v), reverse=True)[:12]
print("%.1f %.2f %s (upcalls %.1f)" % (tot / div, secs, " ".join("%s=%.1f" % (k, v / div) for v, k in top), up / div))
PY
}
# window PREFIX [K]: the brick's counts before (PREFIX0) and after (PREFIX1) K (default 1)
# times --window seconds.
window() {
  sleep 0.5 # a request of a rank just stopped or let go reaches the brick
  snap "${1}0"
  sleep $((window * ${2:-1}))
  snap "${1}1"
}
# persec PREFIX: "RATE fop=rate ..." of a window, in operations per second.
persec() {
  local tot secs fops
  read -r tot secs fops <<<"$(ops "${1}0" "${1}1")"
  python3 -c '
import sys
tot, secs = float(sys.argv[1]), float(sys.argv[2])
parts = [(k, float(v) / secs) for k, v in (f.split("=") for f in sys.argv[3].split() if "=" in f)]
print("%.1f %s (%.1f s)" % (tot / secs, " ".join("%s=%.1f" % p for p in parts), secs))' "$tot" "$secs" "$fops"
}
calc() { python3 -c "print('%.1f' % ($1))"; }
# keep_out TAG: a failed run's last lines, and its whole output kept where $T's removal does not
# take it (a run of 20,000 shards takes half an hour: what went wrong must not be lost).
keep_out() {
  local keep p rel
  keep=$(mktemp "${TMPDIR:-/tmp}/metadata-run-$1.XXXXXX.out")
  cp "$T/run-$1.out" "$keep"
  tail -20 "$T/run-$1.out"
  # A file the run could not open: what the brick holds there, and what a new client sees.
  grep -o "cannot open result '[^']*'" "$T/run-$1.out" | sed "s/^cannot open result '//; s/'\$//" | sort -u | head -5 |
    while read -r p; do
      rel=${p#"$T/mnt/"}
      {
        echo "== $p"
        echo "-- on the brick:"
        ls -la --time-style=full-iso "$GLUSTER_BRICK/$(dirname "$rel")" 2>&1
        getfattr -d -m . -e hex "$GLUSTER_BRICK/$rel" 2>&1 | head -20
        echo "-- through a new client:"
        gluster_run "look-$1" ls -la --time-style=full-iso "$(dirname "$p")" 2>&1
        echo "-- every line of the run that names its shard:"
        grep -n -- "$(basename "$(dirname "$(dirname "$rel")")")" "$T/run-$1.out" | head -20
      } >>"$keep.missing" 2>&1
    done
  [ ! -s "$keep.missing" ] || { cat "$keep.missing"; echo "metadata bench: what the brick holds: $keep.missing" >&2; }
  echo "metadata bench: the run's whole output: $keep" >&2
}
# rows FILE N: N one-row records.
rows() {
  [ -f "$1" ] || python3 -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "m %d" % i}) + "\n")' "$1" "$2"
}
# status_times JOB NAME [BIN]: `status` of JOB --status-runs times (default 3) through a new
# client NAME, with BIN (default --bin); prints "median runs..." (exit 0 or 1 is a status, 2 an
# error).
status_times() {
  local out
  out=$(gluster_run "$2" /bin/bash -c '
for i in $(seq 1 "$2"); do
  s=$EPOCHREALTIME; rc=0
  "$0" status --job-dir "$1" >/dev/null 2>"$3" || rc=$?
  e=$EPOCHREALTIME
  [ "$rc" -le 1 ] || { echo "status exited $rc: $(tail -3 "$3")" >&2; exit 1; }
  echo "${s/,/.} ${e/,/.}"
done' "${3:-$bin}" "$1" "$status_runs" "$T/status-$2.err") || fail "status of $1 failed"
  awk '{ t[NR] = $2 - $1 } END { n = NR; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
    printf "median %.3f s of %d (sorted:", t[int((n + 1) / 2)], n; for (i = 1; i <= n; i++) printf " %.3f", t[i]; printf ")" }' <<<"$out"
}

# ---- one configuration: R ranks, N short shards and one long one
one_config() {
  local r=$1 n=$2 tag=$1x$2 total=$(($2 + 1))
  local job=$T/mnt/job-$tag brick=$GLUSTER_BRICK/job-$tag slow=$T/slow-$tag s=$T/snap-$tag
  rows "$T/in-$total.jsonl" "$total"
  mkdir -p "$s"
  # The long shard is the first one the last host runs: it waits on a FIFO (bash's read, no
  # process started while it waits: a child's exit closes the shard's log, a FLUSH at the
  # brick) until the benchmark writes to it.
  mkfifo "$T/go-$tag"
  cat >"$T/proc-$tag.sh" <<EOF
#!/bin/bash
if [ "\$(hostname)" = node$r ] && mkdir "$slow" 2>/dev/null; then
  hostname >"$slow/host"
  echo "\${EPOCHREALTIME/,/.}" >"$slow/start"
  read -r -t 3600 _ <>"$T/go-$tag" || true
else
  sleep "\$1"
fi
cp "\$2" "\$3"
EOF
  chmod +x "$T/proc-$tag.sh"
  local common=(--config "$T/recipe.yaml" --dataset-path "$T/in-$total.jsonl" --num-shards "$total"
    --process-cmd "$T/proc-$tag.sh $sleep_secs {input} {output}" --job-dir "$job")
  snap "$s/p0"
  gluster_run "prep-$tag" "$bin" prepare "${common[@]}" >"$T/prep.out" 2>&1 || { cat "$T/prep.out"; fail "prepare of $tag failed"; }
  snap "$s/p1"
  read -r tot secs fops <<<"$(ops "$s/p0" "$s/p1" "$total")"
  say "$tag: prepare: $tot ops per shard ($secs s): $fops"

  ranks_reset
  export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS OMPI_MCA_orte_leave_session_attached=1
  snap "$s/r0"
  # shellcheck disable=SC2086
  timeout 3600 $MPIRUN $FAKEHOSTS_MPIRUN_ARGS -np "$r" -npernode 1 "$T/rank.sh" "$bin" run "${common[@]}" \
    --no-backup $run_args >"$T/run-$tag.out" 2>&1 &
  local mp=$! i done_n
  unset FAKEHOSTS_GLUSTER OMPI_MCA_orte_leave_session_attached
  # The tail: every shard done but the long one, which runs.
  while :; do
    kill -0 "$mp" 2>/dev/null || { keep_out "$tag"; fail "$tag: mpirun ended before the tail"; }
    if [ -f "$slow/host" ]; then
      done_n=$(find "$brick/state/done" -maxdepth 1 -name 'part-*.json' 2>/dev/null | wc -l)
      [ "$done_n" -lt "$n" ] || break
    fi
    sleep 0.2
  done
  snap "$s/t0"
  local t_tail
  t_tail=$(now)
  local holder="" idle=() k
  for k in $(seq 0 $((r - 1))); do
    if [ "$(cat "$T/ranks/host.$k")" = "$(cat "$slow/host")" ]; then holder=$k
    elif [ "$k" != 0 ]; then idle+=("$(cat "$T/ranks/pid.$k")"); fi
  done
  [ -n "$holder" ] && [ "$holder" != 0 ] && [ "${#idle[@]}" = $((r - 2)) ] ||
    fail "$tag: the long shard runs on $(cat "$slow/host"), rank '${holder}': no clean split"
  # The windows, from the tail's start: J every rank but rank 0 (twice as long: the idle ranks
  # first read again what the last shards changed); I one idle rank and the long shard's; H
  # the long shard's rank alone; Z every rank stopped; D rank 0 alone; A every rank. The long
  # shard's rank goes on heartbeating (an idle rank reads its lock again after each) but for Z
  # and D, less than its lease (120 s).
  local r0pid hpid
  r0pid=$(cat "$T/ranks/pid.0") hpid=$(cat "$T/ranks/pid.$holder")
  kill -STOP "$r0pid"
  # What rank 0's view last showed before the stop: its last progress line's shards done (the
  # line reaches the output through mpirun in well under the half second of the first window).
  sleep 0.5
  local seen_done
  seen_done=$({ grep -o 'Progress: [0-9]*/' "$T/run-$tag.out" || true; } | tail -1 | tr -dc '0-9')
  seen_done=${seen_done:-0} # no progress line yet (a job shorter than its period)
  window "$s/j" 2
  [ "${#idle[@]}" -le 1 ] || kill -STOP "${idle[@]:1}"
  window "$s/i"
  kill -STOP "${idle[0]}"
  window "$s/h"
  kill -STOP "$hpid"
  window "$s/z"
  kill -CONT "$r0pid"
  window "$s/d"
  kill -CONT "${idle[@]}" "$hpid"
  window "$s/a"
  snap "$s/t1"
  local t_rel
  t_rel=$(now)
  timeout 10 sh -c 'echo go >"$1"' sh "$T/go-$tag" || fail "$tag: the long shard does not wait on its FIFO"
  local rc=0
  wait "$mp" || rc=$?
  snap "$s/r1"
  [ "$rc" = 0 ] && grep -q '^PASS' "$T/run-$tag.out" || { keep_out "$tag"; fail "$tag: run exited $rc"; }
  ranks_expect "$r" 0
  exactly_once "$brick" --fence >"$T/once.out" 2>&1 || { head -20 "$T/once.out"; fail "$tag: exactly-once does not hold"; }
  pass "$tag: run PASS on $r GlusterFS clients, exactly once"

  read -r tot secs fops <<<"$(ops "$s/r0" "$s/r1" "$s/t0" "$s/t1" "$total")"
  say "$tag: job: $tot ops per shard ($total shards, $secs s of run without the held tail of $(awk -v b="$t_rel" -v c="$t_tail" 'BEGIN { printf "%.1f", b - c }') s): $fops"
  local job_tot=$tot
  # Where the job's figure goes: the job up to the tail (every shard run but the long one), and
  # its end (from the long shard's release: that shard's finish, the ranks' leaving, rank 0's
  # verify, merge and report).
  read -r tot secs fops <<<"$(ops "$s/r0" "$s/t0" "$total")"
  say "$tag: job up to the tail: $tot ops per shard ($secs s): $fops"
  read -r tot secs fops <<<"$(ops "$s/t1" "$s/r1" "$total")"
  say "$tag: job's end, from the long shard's release: $tot ops per shard ($secs s): $fops"
  local a j i h z d
  read -r j fops <<<"$(persec "$s/j")"; say "$tag: tail J, the $((r - 2)) idle ranks and the long shard's: $j ops/s: $fops"
  read -r i fops <<<"$(persec "$s/i")"; say "$tag: tail I, one idle rank and the long shard's: $i ops/s: $fops"
  read -r h fops <<<"$(persec "$s/h")"; say "$tag: tail H, the long shard's rank alone: $h ops/s: $fops"
  read -r z fops <<<"$(persec "$s/z")"; say "$tag: tail Z, every rank stopped: $z ops/s: $fops"
  read -r d fops <<<"$(persec "$s/d")"; say "$tag: tail D, rank 0 alone: $d ops/s: $fops"
  read -r a fops <<<"$(persec "$s/a")"; say "$tag: tail A, every rank: $a ops/s: $fops"
  say "$tag: idle rank in the tail: $(calc "($j - $h) / $((r - 2))") ops/s in its first $((2 * window)) s, (J - H) / $((r - 2)) idle ranks; then $(calc "$i - $h") ops/s measured alone (I - H)"
  say "$tag: rank 0 following in the tail: $(calc "$d - $z") ops/s with its own idle worker loop (D - Z), $(calc "$d - $z - ($i - $h)") ops/s without it; the long shard's rank: $(calc "$h - $z") ops/s (H - Z)"
  # Window D is where rank 0's view catches up with the shards that finished after its last
  # progress line before the stop; the issue's target for rank 0 following is 5 requests per
  # finished shard and 10 a second.
  local caught=$((n - seen_done))
  say "$tag: rank 0's catch-up in D: $caught shard(s) finished since its last progress line before the stop ($seen_done/$total shown); D - Z made $(calc "($d - $z) * $window") requests in $window s, $(calc "($d - $z) * $window / max(1, $caught)") per shard caught up (target: at most 5 per shard + 10/s, $(calc "5 * $caught + 10 * $window") here)"
  # The issue's job: the long shard takes 40 s, its tail what is left of them once the rest is
  # done, at the tail's first rate (J, and rank 0's D - Z).
  local left
  left=$(calc "max(0, 40 - ($t_tail - $(cat "$slow/start")))")
  say "$tag: job as in the issue (a long shard of 40 s: a tail of $left s at $(calc "$j + $d - $z") ops/s): $(calc "($job_tot * $total + ($j + $d - $z) * $left) / $total") ops per shard"
  say "$tag: status on the finished job: $(status_times "$job" "st-$tag")"
  [ -z "$compare_bin" ] || say "$tag: status on the finished job, $compare_bin: $(status_times "$job" "stc-$tag" "$compare_bin")"
}

# ---- status on a large job: before any work, and after a partial run
status_job() {
  local n=$1 job=$T/mnt/status-$1 s=$T/snap-status-$1 t0 t1
  rows "$T/in-$n.jsonl" "$n"
  mkdir -p "$s"
  snap "$s/p0"; t0=$(now)
  gluster_run "sprep-$n" "$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in-$n.jsonl" --num-shards "$n" \
    --process-cmd 'cp {input} {output}' --job-dir "$job" >"$T/prep.out" 2>&1 || { cat "$T/prep.out"; fail "prepare of $n shards failed"; }
  t1=$(now); snap "$s/p1"
  read -r tot secs fops <<<"$(ops "$s/p0" "$s/p1" "$n")"
  say "status $n: prepare through one client: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, $tot ops per shard: $fops"
  say "status $n: before any work: $(status_times "$job" "s0-$n")"
  [ -z "$compare_bin" ] || say "status $n: before any work, $compare_bin: $(status_times "$job" "s0c-$n" "$compare_bin")"
  gluster_run "swork-$n" "$bin" worker --job-dir "$job" --max-shards "$partial" --no-backup --progress-secs 0 >"$T/work.out" 2>&1 ||
    { tail -5 "$T/work.out"; fail "the worker of $n shards failed"; }
  say "status $n: after $partial shards done: $(status_times "$job" "s1-$n")"
  [ -z "$compare_bin" ] || say "status $n: after $partial shards done, $compare_bin: $(status_times "$job" "s1c-$n" "$compare_bin")"
  # The rest made finished (finish_job.py: a done record, fence, attempt folder and result each,
  # written through one client): what status reads most, every shard's record, attempt and result.
  # First all but the last $catch, then a kept view follows the job as rank 0's progress line
  # does (`status --watch`, a refresh every 10 s, through a client of its own): 2 x --window
  # seconds in which nothing changes, then the view stopped (SIGSTOP) while the last shards are
  # finished and let go: its next --window seconds catch up with them (and end the watch: the
  # job is complete). Against the issue's rank 0 following: 5 requests per shard + 10 a second.
  local catch=40 wjob wpid
  [ "$n" -gt $((partial + catch + 1)) ] || fail "status $n: fewer shards than --partial + $catch + 1"
  gluster_run "sfin-$n" python3 "$repo/tests/bench/finish_job.py" "$job" --results --events --limit $((n - partial - catch - 1)) \
    >"$T/fin.out" 2>&1 || { tail -5 "$T/fin.out"; fail "finishing the job of $n shards failed"; }
  gluster_run "sw-$n" "$bin" status --job-dir "$job" --watch --interval 10 >"$T/watch-$n.out" 2>&1 &
  wjob=$!
  wait_for 600 grep -q '^Progress' "$T/watch-$n.out"
  sleep 12 # past the first refreshes: the folders' stamps confirmed (docs/design.md, Observability)
  wpid=$(pgrep -f -- "status --job-dir $job --watch" | head -1)
  [ -n "$wpid" ] || fail "status $n: no status --watch process"
  window "$s/w" 2
  kill -STOP "$wpid"
  gluster_run "sfin2-$n" python3 "$repo/tests/bench/finish_job.py" "$job" --results --events --limit "$catch" \
    >"$T/fin.out" 2>&1 || { tail -5 "$T/fin.out"; fail "finishing the job of $n shards failed"; }
  sleep 1
  snap "$s/c0"
  kill -CONT "$wpid"
  sleep "$window"
  snap "$s/c1"
  kill -0 "$wpid" 2>/dev/null || fail "status $n: status --watch ended with a shard left"
  gluster_run "sfin3-$n" python3 "$repo/tests/bench/finish_job.py" "$job" --results --events >"$T/fin.out" 2>&1 ||
    { tail -5 "$T/fin.out"; fail "finishing the job of $n shards failed"; }
  timeout 60 tail --pid="$wpid" -f /dev/null || fail "status $n: status --watch did not end with the job complete"
  wait "$wjob" || fail "status $n: status --watch of the complete job exited $?"
  local w c
  read -r w fops <<<"$(persec "$s/w")"
  say "status $n: a kept view (status --watch, 10 s), nothing changing: $w ops/s: $fops"
  read -r c secs fops <<<"$(ops "$s/c0" "$s/c1")"
  say "status $n: the view catching up with $catch shards finished: $c requests in $secs s, $(calc "$c / $catch") per shard (rank 0 following's target: 5 per shard + 10/s, $(calc "5 * $catch + 10 * $secs") here): $fops"
  say "status $n: finished: $(status_times "$job" "s2-$n")"
  [ -z "$compare_bin" ] || say "status $n: finished, $compare_bin: $(status_times "$job" "s2c-$n" "$compare_bin")"
}

for c in $configs; do one_config "${c%x*}" "${c#*x}"; done
for n in $status_shards; do status_job "$n"; done
