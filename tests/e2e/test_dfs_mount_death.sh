#!/bin/bash
# A host's mount of the job folder dies under a running shard (its GlusterFS client is
# SIGKILLed; tests/e2e/gluster.sh), 4 workers, each through its own client:
#   - that worker notices at its next lease refresh or step and, after the outage budget,
#     exits 2, its last ERROR line naming the job folder and the errno, within heartbeat + 5 s
#     of the death;
#   - its child is stopped;
#   - the others take its shard over once the lease runs out and exit 0;
#   - exactly one done record per shard, no failure counted, output identical to local disk.
# Then a worker stopped (SIGTERM) while its mount is dead under a running shard:
#   - it exits 143 with no error for the writes it cannot make, and says in one line that its
#     claim was left to expire with its lease, with the folder and the errno (it once said two
#     errors and that its claims were released); its child is stopped;
#   - another worker takes the shard over once the lease runs out: exactly once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/gluster.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup

dfs_input 240
# proc.sh, with each child's pid, input and output logged on local disk (to check it was stopped).
cat >"$T/proc-log.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$2 \$3" >>$T/procs.log
exec $T/proc.sh "\$@"
EOF2
chmod +x "$T/proc-log.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 24)
dfs_plain_run "$T/plain.jsonl"
HB=1 LEASE=5
run_expect 0 gluster_run prep "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/job" \
  --process-cmd "$T/proc-log.sh 3 {input} {output}" --heartbeat-secs $HB --lease-secs $LEASE
job=$GLUSTER_BRICK/job

pids=()
for w in 1 2 3 4; do
  gluster_run "node$w" sh -c 'echo $$ >"$0"; exec "$@"' "$T/w$w.pid" "$BIN" worker --job-dir "$T/mnt/job" \
    --poll-interval-secs 1 >"$T/w$w.out" 2>"$T/w$w.err" &
  pids+=($!)
done
for w in 1 2 3 4; do wait_for 20 test -s "$T/w$w.pid"; done
w2=$(cat "$T/w2.pid")
held=
for _ in $(seq 1 600); do
  held=$(dfs_held_by "$job" "$w2")
  [ -z "$held" ] || break
  sleep 0.1
done
[ -n "$held" ] || fail "worker 2 took no shard within 60 s"
read -r shard adir _ <<<"$held"
# Its child (the one whose output goes to its attempt's folder, not a taker's) runs.
child_of_w2() { awk -v a="/$adir/" 'index($3, a) { print $1 }' "$T/procs.log"; }
w2_child_runs() { [ -n "$(child_of_w2)" ]; }
wait_for 10 w2_child_runs

t0=$(date +%s.%N)
kill -KILL "$(gluster_client_pid node2)"
rc2=0
wait_bounded 30 "${pids[1]}"
wait "${pids[1]}" || rc2=$?
dt=$(python3 -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0")
echo "node2's mount killed under $shard: its worker exited $rc2 after $dt s"
[ "$rc2" = 2 ] || { cat "$T/w2.err"; fail "the worker whose mount died exited $rc2, expected 2"; }
python3 -c "import sys; sys.exit(float(sys.argv[1]) > $HB + 5)" "$dt" || fail "it took $dt s to exit (bound: heartbeat + 5 s)"
grep ERROR "$T/w2.err" | tail -1 | grep -qF "ERROR: the job folder $T/mnt/job cannot be reached: Transport endpoint is not connected (errno 107)" ||
  { cat "$T/w2.err"; fail "the error does not name the job folder and the errno"; }
child=$(child_of_w2)
! kill -0 "$child" 2>/dev/null || fail "the child $child of $shard still runs after its worker exited"
pass "mount death: exit 2 after $dt s, its last ERROR naming the job folder and errno 107, its child stopped"

rcs=()
for k in 0 2 3; do rc=0; wait_bounded 90 "${pids[$k]}"; wait "${pids[$k]}" || rc=$?; rcs+=("$rc"); done
[ "${rcs[*]}" = "0 0 0" ] || { tail -3 "$T"/w*.err; fail "the other workers exited ${rcs[*]}"; }
run_expect 0 gluster_run check "$BIN" merge --job-dir "$T/mnt/job" --output "$T/out.jsonl"
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
echo "mount death: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed"
[ "$done" = 24 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 24 shards"
[ $((takeovers + backups)) -ge 1 ] || fail "nobody took $shard over"
exactly_once "$job" --fence || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$T/out.jsonl" || fail "the merged output differs from a run on local disk"
pass "the others took $shard over ($takeovers takeover, $backups backup) and exited 0: exactly once, output identical"

# ---- A stop while the mount is dead: a second job of 2 shards whose processor runs for 60 s
# until $T/fast exists; lease 20 s, so the stop comes well within the outage budget (18 s).
cat >"$T/slow.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$1 \$2" >>$T/procs2.log
[ -e "$T/fast" ] || sleep 60
cp "\$1" "\$2"
EOF2
chmod +x "$T/slow.sh"
run_expect 0 gluster_run prep2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 2 \
  --job-dir "$T/mnt/job2" --process-cmd "$T/slow.sh {input} {output}" --heartbeat-secs 1 --lease-secs 20
gluster_run node5 sh -c 'echo $$ >"$0"; exec "$@"' "$T/w5.pid" "$BIN" worker --job-dir "$T/mnt/job2" \
  --poll-interval-secs 1 >"$T/w5.out" 2>"$T/w5.err" &
p5=$!
wait_for 20 test -s "$T/w5.pid"
wait_for 30 test -s "$T/procs2.log"
read -r child5 _ <"$T/procs2.log"
shard=part-00000-of-00002
kill -KILL "$(gluster_client_pid node5)"
# It notices at its next lease refresh, then rides the outage out; the stop comes meanwhile.
wait_for 10 grep -qF "cannot refresh the lease of $shard" "$T/w5.err"
kill -TERM "$(cat "$T/w5.pid")"
rc5=0
wait_bounded 30 "$p5"
wait "$p5" || rc5=$?
cat "$T/w5.err"
[ "$rc5" = 143 ] || fail "the worker stopped while its mount was dead exited $rc5, expected 143"
! grep -q ERROR "$T/w5.err" || fail "it said errors for the writes it could not make"
! grep -q 'claims were released' "$T/w5.err" || fail "it said its claims were released"
grep -F "stopped by SIGTERM; its claim on $shard was left to expire with its lease" "$T/w5.err" |
  grep -qF "the job folder $T/mnt/job2 did not take the release: Transport endpoint is not connected (errno 107)" ||
  fail "it did not say that its claim was left to its lease, with the folder and errno"
! kill -0 "$child5" 2>/dev/null || fail "its child $child5 still runs"
pass "a stop on a dead mount: exit 143, one line saying the claim was left to its lease, no error, child stopped"
touch "$T/fast"
# --no-backup: the shard must come back through its lease, not through a backup of it.
run_expect 0 gluster_run node6 "$BIN" worker --job-dir "$T/mnt/job2" --poll-interval-secs 1 --no-backup
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$GLUSTER_BRICK/job2")"
[ "$takeovers" = 1 ] && [ "$done" = 2 ] || fail "$takeovers takeovers and $done done records, expected 1 and 2"
exactly_once "$GLUSTER_BRICK/job2" --fence --uncounted --stale-ok || fail "the accepted results of job2 are not one per shard"
pass "another worker took $shard over after the lease: exactly once"
