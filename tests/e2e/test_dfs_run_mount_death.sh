#!/bin/bash
# run -np 4 on 4 fake hosts, each with its own GlusterFS client (tests/e2e/gluster.sh), when a
# host's mount dies under a running shard (its client SIGKILLed), heartbeat 1 s, lease 5 s:
#   1. node2 (rank 1): that rank says the job folder and the errno in one error line within
#      heartbeat + 5 s of the death, its child is stopped, it claims nothing more and does not
#      stop the others; they take its shard over after the lease, the job PASSes, every rank
#      (the lost one too) exits 0, and so does mpirun;
#   2. node1 (rank 0, which verifies and merges): the others finish every shard; every rank
#      ends within a bound with exit 2 and one error line saying that the work is done but not
#      verified nor merged, and how to finish; nothing is merged; 'verify' from a node that
#      reaches the folder, as the error says, PASSes.
# Each: exactly one done record per shard, no failed attempt, output identical to local disk.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
. "$(dirname "$0")/gluster.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
fakehosts_check
fakehosts_setup 4
gluster_setup

dfs_input 240
# proc.sh, with each child's pid, host and input logged on local disk; on the host named in
# $T/slow-host a shard takes 30 s, so that a child not stopped would outlive every check.
cat >"$T/proc-log.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$(hostname) \$2" >>$T/procs.log
secs=\$1
shift
[ "\$(hostname)" != "\$(cat $T/slow-host)" ] || secs=30
exec $T/proc.sh "\$secs" "\$@"
EOF2
chmod +x "$T/proc-log.sh"
: >"$T/slow-host"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 24)
dfs_plain_run "$T/plain.jsonl"
HB=1 LEASE=5
export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS
# Without this mpirun starts orted with --daemonize, which would leave the host's mount behind.
export OMPI_MCA_orte_leave_session_attached=1

# start_run JOB [MPIRUN OPTION...]: run -np 4 on the fake hosts in the background (stdout and
# stderr in $T/run.out and $T/run.err, the launcher's pid in RUN_PID; procs.log emptied).
start_run() {
  local job=$1
  shift
  ranks_reset
  : >"$T/procs.log"
  # shellcheck disable=SC2086
  $MPIRUN $FAKEHOSTS_MPIRUN_ARGS "$@" -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
    --process-cmd "$T/proc-log.sh 2 {input} {output}" --job-dir "$T/mnt/$job" --heartbeat-secs $HB \
    --lease-secs $LEASE --poll-interval-secs 1 >"$T/run.out" 2>"$T/run.err" &
  RUN_PID=$!
  ranks_wait_pids 4 60
}
# rank_on HOST: the rank that runs on HOST.
rank_on() { grep -lx "$1" "$T"/ranks/host.* | sed 's/.*host\.//'; }
# child_of HOST: the pid of HOST's last child of $SHARD (procs.log), or nothing.
child_of() { awk -v h="$1" -v s="/$SHARD.jsonl" '$2 == h && index($3, s) { p = $1 } END { print p }' "$T/procs.log"; }
# kill_under_shard HOST JOB: once HOST's rank holds a shard whose child runs (for 30 s: HOST is
# made the slow host before the run), kill HOST's client; sets SHARD, RANK, CHILD and T0 (the kill's time).
kill_under_shard() {
  local pid
  wait_for 20 test -n "$(rank_on "$1")"
  RANK=$(rank_on "$1")
  pid=$(cat "$T/ranks/pid.$RANK")
  SHARD= CHILD=
  for _ in $(seq 1 600); do
    read -r SHARD _ <<<"$(dfs_held_by "$GLUSTER_BRICK/$2" "$pid" 20)"
    [ -z "$SHARD" ] || CHILD=$(child_of "$1")
    [ -z "$CHILD" ] || break
    sleep 0.1
  done
  [ -n "$CHILD" ] || { cat "$T/run.err"; fail "rank $RANK on $1 ran no shard within 60 s"; }
  kill -0 "$CHILD" || fail "the child $CHILD of $SHARD on $1 ended before the kill"
  T0=$(now)
  kill -KILL "$(gluster_client_pid "$1")"
}
# wait_line SECS TEXT: TEXT appears in the launcher's stderr within SECS of the kill; prints
# how long after the kill it was seen.
wait_line() {
  local end
  end=$(python3 -c "import sys; print(float(sys.argv[1]) + float(sys.argv[2]))" "$T0" "$1")
  until grep -qF -- "$2" "$T/run.err"; do
    python3 -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" "$(now)" "$end" ||
      { cat "$T/run.err"; fail "not within $1 s of the kill: $2"; }
    sleep 0.05
  done
  python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) - float(sys.argv[2])))" "$(now)" "$T0"
}
# child_stopped: the child that ran $SHARD when the mount was killed no longer runs.
child_stopped() { wait_for 5 sh -c "! kill -0 $CHILD 2>/dev/null"; }
# check_job JOB: every shard done once, no failed attempt or record, the output of local disk.
check_job() {
  local job=$GLUSTER_BRICK/$1 attempts shards takeovers superseded done backups failed
  read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
  echo "$1: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed"
  [ "$done" = 24 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 24 shards"
  [ $((takeovers + backups)) -ge 1 ] || fail "nobody took $SHARD over"
  exactly_once "$job" --fence --uncounted --stale-ok || fail "the accepted results are not one per shard, or an attempt failed"
  cmp "$T/plain.jsonl" "$job/merged.jsonl" || fail "the merged output differs from a run on local disk"
}

# ---- 1. node2's mount dies: the job goes on and PASSes
echo node2 >"$T/slow-host"
start_run job1
kill_under_shard node2 job1
seen=$(grep -c " node2 " "$T/procs.log" || true)
dt=$(wait_line $((HB + 5)) "[rank $RANK node2] ERROR: the job folder $T/mnt/job1 cannot be reached: Transport endpoint is not connected (errno 107)") || fail "rank $RANK did not say it lost the job folder in time"
child_stopped
pass "node2's mount killed under $SHARD: rank $RANK said the folder and errno 107 after $dt s, its child stopped"
rc=0
wait_bounded 120 "$RUN_PID"
wait "$RUN_PID" || rc=$?
[ "$rc" = 0 ] || { cat "$T/run.err"; fail "mpirun exited $rc, expected 0"; }
ranks_expect 4 0
grep -qF "PASS: 24 shards were completed by" "$T/run.out" || { cat "$T/run.out"; fail "no PASS"; }
grep -qF "WARNING: 1 rank(s) could not reach the job folder and left the work" "$T/run.err" ||
  { cat "$T/run.err"; fail "rank 0 did not say that a rank left the work"; }
# The lost rank's last error is the one above; no other rank has one.
! grep ERROR "$T/run.err" | grep -vqF "[rank $RANK node2] " || { cat "$T/run.err"; fail "another rank has an error"; }
grep -F "[rank $RANK node2] ERROR" "$T/run.err" | tail -1 | grep -qF "ERROR: the job folder $T/mnt/job1 cannot be reached" ||
  { cat "$T/run.err"; fail "the lost rank's last error is not that its job folder cannot be reached"; }
[ "$(grep -c " node2 " "$T/procs.log")" = "$seen" ] || fail "node2 started a child after its mount died"
check_job job1
pass "node2 lost: the others took $SHARD over, PASS, every rank and mpirun exit 0, exactly once, output identical"

# ---- 2. rank 0's mount dies: the others finish; every rank ends with 2 and how to finish
# RANKS_NOABORT: the ranks' own codes are recorded (Open MPI would end the others at the first).
# shellcheck disable=SC2086
echo node1 >"$T/slow-host"
start_run job2 $RANKS_NOABORT
kill_under_shard node1 job2
[ "$RANK" = 0 ] || fail "node1 runs rank $RANK, expected 0"
dt=$(wait_line $((HB + 5)) "[rank 0 node1] ERROR: the job folder $T/mnt/job2 cannot be reached: Transport endpoint is not connected (errno 107)") || fail "rank 0 did not say it lost the job folder in time"
child_stopped
pass "node1's mount killed under $SHARD: rank 0 said the folder and errno 107 after $dt s, its child stopped"
rc=0
wait_bounded 120 "$RUN_PID"
wait "$RUN_PID" || rc=$?
[ "$rc" = "$(noabort_rc 2)" ] || { cat "$T/run.err"; fail "mpirun exited $rc, expected $(noabort_rc 2)"; }
ranks_expect 4 2
for r in 0 1 2 3; do
  grep -qF "[rank $r node$((r + 1))] ERROR: rank 0 cannot reach the job folder $T/mnt/job2, so the job was neither verified nor merged, although every shard is done; run 'eshard-mpi verify --job-dir $T/mnt/job2' on a node that reaches it" "$T/run.err" ||
    { cat "$T/run.err"; fail "rank $r did not say how to finish"; }
done
! grep -q PASS "$T/run.out" || fail "a PASS without rank 0"
[ ! -e "$GLUSTER_BRICK/job2/merged.jsonl" ] || fail "something was merged without rank 0"
run_expect 0 gluster_run check "$BIN" verify --job-dir "$T/mnt/job2"
expect_out "PASS: 24 shards were completed by"
check_job job2
pass "rank 0 lost: every rank exits 2 saying how to finish; verify from another client PASSes, exactly once, output identical"
