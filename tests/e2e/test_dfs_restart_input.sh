#!/bin/bash
# The file server restarts between a worker's claim and its first look at the shard file, on a
# GlusterFS volume (tests/e2e/gluster.sh): the test hook ESHARD_TEST_HOOK_BEFORE_INPUT_CHECK holds
# the worker there while the brick process is SIGKILLed, until its mount fails; the volume is
# force-started once the worker says it rides the outage out. That step is like any other:
#   - the worker retries until the job folder answers, its attempt ends preempted (not counted
#     toward the retry limit), the shard runs again, and the worker exits 0;
#   - exactly one done record per shard, no failure, output identical to a run on local disk.
# (test_dfs_server_restart kills the brick at a random step; this is the step it once hit,
# where a failed stat of the shard file stopped the worker with exit 2.)
# Then the same outage with a SIGTERM while the worker rides it out: a stop, not a dead mount:
#   - the worker exits 143 without the "cannot be reached ... this worker stops" error (it once
#     took the stop for a spent outage budget: exit 2, and under `run --require-all-nodes`
#     every rank 2 instead of 143); another worker finishes the job, exactly once;
#   - it says no error for the writes it cannot make, nor that it released its claim (it once
#     said both), but one line: the claim was left to expire with its lease, the folder, the
#     errno.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
need_test_hooks
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup --short-caches

dfs_input 60
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 4)
dfs_plain_run "$T/plain.jsonl"
run_expect 0 gluster_run prep "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/job" \
  --process-cmd "$T/proc.sh 0 {input} {output}" --heartbeat-secs 1 --lease-secs 30
job=$GLUSTER_BRICK/job

# The hook, at the first shard only: it says where it is, waits for the brick's death, then until
# the worker's own mount fails (its caches last a second; the hook runs in its namespace).
cat >"$T/hook.sh" <<EOF
#!/bin/sh
mkdir "$T/hooked" 2>/dev/null || exit 0
touch "$T/at-hook"
until [ -e "$T/brick-dead" ]; do sleep 0.1; done
i=0
while stat "$T/mnt/job/state/locks" >/dev/null 2>&1 && [ \$i -lt 100 ]; do i=\$((i + 1)); sleep 0.1; done
EOF
chmod +x "$T/hook.sh"
ESHARD_TEST_HOOK_BEFORE_INPUT_CHECK=$T/hook.sh gluster_run node1 "$BIN" worker --job-dir "$T/mnt/job" \
  --poll-interval-secs 1 --progress-secs 0 >"$T/w.out" 2>"$T/w.err" &
w=$!
wait_for 60 test -e "$T/at-hook"
brick=$(gluster_brick_pid)
[ -n "$brick" ] || fail "no brick pid"
kill -KILL "$brick"
touch "$T/brick-dead"
# The worker rides the outage out (its warning), or ends (the bug): either way, go on.
riding() { grep -q 'cannot be reached (Transport endpoint is not connected); retrying' "$T/w.err" || ! kill -0 "$w" 2>/dev/null; }
wait_for 60 riding
gluster_restart_brick "$brick"
rc=0
wait_bounded 90 "$w"
wait "$w" || rc=$?
cat "$T/w.err"
[ "$rc" = 0 ] || { cat "$T/w.out"; fail "the worker exited $rc after the server's restart under its claim, expected 0"; }
grep -qF 'cannot be reached (Transport endpoint is not connected); retrying' "$T/w.err" || fail "the worker did not ride the outage out"
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
echo "restart before the input check: attempts=$attempts shards=$shards superseded=$superseded failed=$failed"
python3 - "$job" <<'PY' || fail "the attempt cut off by the restart did not end preempted"
import glob, json, os, sys
st = sorted(json.load(open(p)).get("status") for p in glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json")))
print(st)
sys.exit(st != ["done"] * 4 + ["preempted"])
PY
run_expect 0 gluster_run check "$BIN" merge --job-dir "$T/mnt/job" --output "$T/out.jsonl"
exactly_once "$job" --fence --uncounted || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$T/out.jsonl" || fail "the merged output differs from a run on local disk"
pass "a server restart between a claim and its input check: ridden out, the attempt preempted, exit 0, exactly once"

# A stop while the worker rides an outage out: a second job, a shorter lease (budget 8 s).
run_expect 0 gluster_run prep2 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/job2" \
  --process-cmd "$T/proc.sh 0 {input} {output}" --heartbeat-secs 1 --lease-secs 10
sed -e "s|$T/hooked|$T/hooked2|; s|$T/at-hook|$T/at-hook2|; s|$T/brick-dead|$T/brick-dead2|; s|job/state|job2/state|" \
  "$T/hook.sh" >"$T/hook2.sh"
chmod +x "$T/hook2.sh"
# The worker's own pid (gluster_run's is its wrapper's), for the signal.
ESHARD_TEST_HOOK_BEFORE_INPUT_CHECK=$T/hook2.sh gluster_run node2 sh -c 'echo $$ >"$0"; exec "$@"' "$T/w2.pid" \
  "$BIN" worker --job-dir "$T/mnt/job2" --poll-interval-secs 1 --progress-secs 0 >"$T/w2.out" 2>"$T/w2.err" &
w2=$!
wait_for 60 test -e "$T/at-hook2"
wpid=$(cat "$T/w2.pid")
brick=$(gluster_brick_pid)
[ -n "$brick" ] || fail "no brick pid"
kill -KILL "$brick"
touch "$T/brick-dead2"
riding2() { grep -q 'cannot be reached (Transport endpoint is not connected); retrying' "$T/w2.err" || ! kill -0 "$w2" 2>/dev/null; }
wait_for 60 riding2
kill -TERM "$wpid" 2>/dev/null || true
rc=0
wait_bounded 30 "$w2"
wait "$w2" || rc=$?
cat "$T/w2.err"
[ "$rc" = 143 ] || fail "the worker stopped (SIGTERM) during an outage exited $rc, expected 143"
! grep -q 'this worker stops, its shard' "$T/w2.err" || fail "a stop during an outage was reported as a dead mount"
# One true line for the claim it could not give back, no error for each write it could not make.
! grep -q ERROR "$T/w2.err" || fail "a stop during an outage said errors for the writes it could not make"
! grep -q 'claims were released' "$T/w2.err" || fail "a stop during an outage said its claims were released"
grep -F "stopped by SIGTERM; its claim on part-00000-of-00004 was left to expire with its lease" "$T/w2.err" |
  grep -qF "the job folder $T/mnt/job2 did not take the release: Transport endpoint is not connected (errno 107)" ||
  fail "the stopped worker did not say that its claim was left to its lease, with the folder and errno"
gluster_restart_brick "$brick"
run_expect 0 gluster_run node3 "$BIN" worker --job-dir "$T/mnt/job2" --poll-interval-secs 1 --progress-secs 0
run_expect 0 gluster_run check2 "$BIN" merge --job-dir "$T/mnt/job2" --output "$T/out2.jsonl"
exactly_once "$GLUSTER_BRICK/job2" --fence --uncounted --stale-ok || fail "the accepted results of the stopped job are not one per shard"
cmp "$T/plain.jsonl" "$T/out2.jsonl" || fail "the stopped job's merged output differs from a run on local disk"
pass "a SIGTERM while riding out an outage: exit 143, no dead-mount error; the job finished exactly once"
