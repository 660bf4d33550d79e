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
. "$(dirname "$0")/mountdeath.sh"
mountdeath_setup

# ---- 1. node2's mount dies: the job goes on and PASSes
echo node2 >"$T/slow-host"
start_run job1
kill_under_shard node2 job1
seen=$(grep -c " node2 " "$T/procs.log" || true)
dt=$(wait_line $((HB + 5)) "[rank $RANK node2] ERROR: the job folder $T/mnt/job1 cannot be reached: Transport endpoint is not connected (errno 107)") || fail "rank $RANK did not say it lost the job folder in time"
child_stopped
pass "node2's mount killed under $SHARD: rank $RANK said the folder and errno 107 after $dt s, its child stopped"
passed_without_one
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
