#!/bin/bash
# run -np 4 on 4 fake hosts, each with its own GlusterFS client (tests/e2e/gluster.sh,
# mountdeath.sh), heartbeat 1 s, lease 5 s: the edges of a host's mount dying that
# test_dfs_run_mount_death.sh does not reach.
#   1. node2's mount dies between prepare and its rank's first claim (the test hook
#      ESHARD_TEST_HOOK_WORKER_START holds the rank before it reads the manifest): elastic mode
#      treats it like a mount that dies under a shard; that rank rides the outage out, says the
#      job folder and the errno in one error line within heartbeat + 5 s, runs nothing and
#      leaves the work; the others finish, the job PASSes and every rank and mpirun exit 0.
#   2. strict mode (--require-all-nodes), rank 0's mount dies under a shard: every rank ends
#      within a bound with exit 2; rank 0 does not read the dead folder for a summary nor write
#      its report there, and says so in one error line with how to go on; that command run
#      again resumes the job and PASSes.
# Each: exactly one done record per shard, no failed attempt, output identical to local disk.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
. "$(dirname "$0")/gluster.sh"
. "$(dirname "$0")/mountdeath.sh"
need_test_hooks
mountdeath_setup

# rank_errors RANK HOST: the error lines of that rank.
rank_errors() { grep -F "[rank $1 $2] " "$T/run.err" | grep -F "ERROR: " || true; }

# ---- 1. node2's mount dies before its rank reads the manifest
cat >"$T/hook.sh" <<EOF
#!/bin/sh
[ "\$(hostname)" = node2 ] || exit 0
touch "$T/at-start"
until [ -e "$T/mount-dead" ]; do sleep 0.1; done
EOF
chmod +x "$T/hook.sh"
export ESHARD_TEST_HOOK_WORKER_START=$T/hook.sh
start_run job1 "$MPI_EXPORT" ESHARD_TEST_HOOK_WORKER_START
wait_for 60 test -e "$T/at-start"
RANK=$(rank_on node2)
T0=$(now)
kill -KILL "$(gluster_client_pid node2)"
touch "$T/mount-dead"
unset ESHARD_TEST_HOOK_WORKER_START
dt=$(wait_line $((HB + 5)) "[rank $RANK node2] ERROR: the job folder $T/mnt/job1 cannot be reached: Transport endpoint is not connected (errno 107)") ||
  fail "rank $RANK did not say it lost the job folder in time"
pass "node2's mount killed before its first claim: rank $RANK said the folder and errno 107 after $dt s"
passed_without_one
[ "$(rank_errors "$RANK" node2 | wc -l)" = 1 ] || { cat "$T/run.err"; fail "rank $RANK said more than its one error"; }
! grep ERROR "$T/run.err" | grep -vqF "[rank $RANK node2] " || { cat "$T/run.err"; fail "another rank has an error"; }
! grep -q " node2 " "$T/procs.log" || fail "node2 ran a shard"
check_job job1 0
pass "node2 lost before its first claim: the others finished, PASS, every rank and mpirun exit 0, exactly once"

# ---- 2. strict mode: rank 0's mount dies under a shard
echo node1 >"$T/slow-host"
# RANKS_NOABORT: the ranks' own codes are recorded (Open MPI would end the others at the first).
# shellcheck disable=SC2086
start_run job2 $RANKS_NOABORT -- --require-all-nodes
kill_under_shard node1 job2
[ "$RANK" = 0 ] || fail "node1 runs rank $RANK, expected 0"
dt=$(wait_line $((HB + 5)) "[rank 0 node1] ERROR: the job folder $T/mnt/job2 cannot be reached: Transport endpoint is not connected (errno 107)") ||
  fail "rank 0 did not say it lost the job folder in time"
child_stopped
rc=0
wait_bounded 60 "$RUN_PID"
wait "$RUN_PID" || rc=$?
[ "$rc" = "$(noabort_rc 2)" ] || { cat "$T/run.err"; fail "mpirun exited $rc, expected $(noabort_rc 2)"; }
ranks_expect 4 2
grep -qF "[rank 0 node1] ERROR: rank 0 cannot reach the job folder $T/mnt/job2, so the job stopped (strict mode, --require-all-nodes) with no summary and no report; 'eshard-mpi status --job-dir $T/mnt/job2' on a node that reaches it says what is left, and this run command again resumes it" "$T/run.err" ||
  { cat "$T/run.err"; fail "rank 0 did not say in one line that it wrote no summary nor report"; }
# After its worker's error, rank 0 has one thing to say.
[ "$(rank_errors 0 node1 | sed -n '/cannot be reached: Transport endpoint/,$p' | wc -l)" = 2 ] ||
  { cat "$T/run.err"; fail "rank 0 said more than one error after its worker's"; }
! grep -F "[rank 0 node1] " "$T/run.err" | grep -qE "no summary of the job|no report was written" ||
  { cat "$T/run.err"; fail "rank 0 tried to read or write the dead job folder"; }
! grep -q "^Report: " "$T/run.out" || fail "a report was written"
pass "strict mode, rank 0's mount killed under $SHARD (error after $dt s): every rank exits 2, one line, no summary or report tried"
# As the line says: the same command again resumes the job (every host mounts anew).
: >"$T/slow-host"
start_run job2 -- --require-all-nodes
rc=0
wait_bounded 120 "$RUN_PID"
wait "$RUN_PID" || rc=$?
[ "$rc" = 0 ] || { cat "$T/run.err"; fail "the resumed run exited $rc, expected 0"; }
grep -qF "PASS: 24 shards were completed by" "$T/run.out" || { cat "$T/run.out"; fail "no PASS"; }
check_job job2
pass "the strict job resumed: PASS, exactly once, output identical"
