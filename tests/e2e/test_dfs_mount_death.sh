#!/bin/bash
# A host's mount of the job folder dies under a running shard (its GlusterFS client is
# SIGKILLed; tests/e2e/gluster.sh), 4 workers, each through its own client:
#   - that worker notices at its next lease refresh or step and, after the outage budget,
#     exits 2, its last ERROR line naming the job folder and the errno, within heartbeat + 5 s
#     of the death;
#   - its child is stopped;
#   - the others take its shard over once the lease runs out and exit 0;
#   - exactly one done record per shard, no failure counted, output identical to local disk.
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
