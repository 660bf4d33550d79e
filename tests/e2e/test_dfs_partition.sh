#!/bin/bash
# A partitioned host: 3 workers on a GlusterFS volume (tests/e2e/gluster.sh) with the 600 s
# client caches; the client of node2 reaches the server over a veth pair from a network
# namespace of its own (the worker keeps the normal network). While node2's shard runs, that
# link is cut, for longer than the lease: the volume's ping timeout (GlusterFS's default,
# 42 s) is longer than the cut, so node2's file-system calls hang instead of failing, as on an
# NFS hard mount, and its worker cannot refresh its lease or notice anything. Then:
#   - another worker takes the shard over once the lease runs out, and the link comes back;
#   - the token check refuses node2 at its heartbeat, not at a publish: while the child runs
#     the worker refreshes its lease every heartbeat, and the first one after the cut hangs in
#     the open() of the lock (an open always asks the server), so the worker does nothing else
#     until the link returns. Then that open resolves the lock's name on the server: the
#     taker's lock, whose token is not node2's, so the heartbeat reports the lease lost; node2
#     stops its child and publishes nothing; its attempt ends "stale" (the takeover marked it);
#   - every worker exits 0 within a bound; exactly one done record per shard, the taker's;
#     no failed record; the merged output is byte-identical to a run on local disk.
# The other workers run with --no-backup: a backup of the hung shard would win before the
# lease runs out, and the shard would not be taken over (test_dfs_faults.sh tries that).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup
PING=42
gluster_cli volume set "$GLUSTER_VOL" network.ping-timeout $PING >/dev/null || fail "gluster: network.ping-timeout"
gluster_netns_setup

dfs_input 240
# proc.sh, each child's pid, input and output logged on local disk; PROC_SECS (in a worker's
# environment) overrides how long its children take.
cat >"$T/proc-log.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$2 \$3" >>$T/procs.log
exec $T/proc.sh "\${PROC_SECS:-\$1}" "\$2" "\$3"
EOF2
chmod +x "$T/proc-log.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 24)
dfs_plain_run "$T/plain.jsonl"
HB=1 LEASE=8
run_expect 0 gluster_run prep "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/job" \
  --process-cmd "$T/proc-log.sh 0.3 {input} {output}" --heartbeat-secs $HB --lease-secs $LEASE
job=$GLUSTER_BRICK/job

# worker W [VAR=VALUE...] [-- OPTIONS...]: a worker through its own client (node2's in the
# namespace), in the background, with VAR=VALUE in its environment and more OPTIONS.
worker() {
  local w=$1 envs=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  env "${envs[@]}" "$SRC/tests/e2e/gluster-run.sh" "$GLUSTER_SERVER" "$GLUSTER_VOL" "$T/mnt" "$GLUSTER_PIDS/node$w.pid" \
    sh -c 'echo $$ >"$0"; exec "$@"' "$T/w$w.pid" "$BIN" worker --job-dir "$T/mnt/job" --poll-interval-secs 1 \
    --progress-secs 0 "$@" >"$T/w$w.out" 2>"$T/w$w.err" &
}
# lock_of PID: "SHARD ATTEMPT_DIR TOKEN" of the running lock worker PID holds (read on the brick).
lock_of() {
  python3 - "$job" "$1" <<'PY'
import json, os, sys
d = os.path.join(sys.argv[1], "state", "locks")
for n in sorted(os.listdir(d) if os.path.isdir(d) else []):
    try:
        l = json.load(open(os.path.join(d, n)))
    except Exception:
        continue
    if l.get("pid") == int(sys.argv[2]) and l.get("status", "running") == "running":
        print(l["shard_id"], l["attempt_dir"], l["token"]); break
PY
}

worker 2 GLUSTER_NETNS="$GLUSTER_NETNS" PROC_SECS=120
p2=$!
wait_for 20 test -s "$T/w2.pid"
w2=$(cat "$T/w2.pid")
holds_lock() { [ -n "$(lock_of "$1")" ]; }
wait_for 30 holds_lock "$w2"
read -r shard adir token <<<"$(lock_of "$w2")"
# Its client talks to the server through the pair, not through this namespace's loopback.
nsenter --net="${GLUSTER_NETNS%% *}" ss -tnH state established | grep -q . ||
  fail "node2's client has no connection in its own network namespace"

gluster_link down
t0=$(now)
echo "node2's link cut at $t0 under $shard (its attempt $adir)"
worker 1 -- --no-backup && p1=$!
worker 3 -- --no-backup && p3=$!
# The lease runs out unrefreshed: another worker moves the lock aside and claims the shard.
wait_for 60 compgen -G "$job/state/stale_locks/$shard.*" >/dev/null
t1=$(now)
kill -0 "$p2" || fail "node2's worker ended during the cut"
taker_done=$(test -e "$job/state/done/$shard.json" && echo yes || echo no)
gluster_link up
cut=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
echo "taken over $cut s after the cut (lease $LEASE s, ping timeout $PING s); the taker's record there: $taker_done; link up"
python3 -c "import sys; sys.exit(not $LEASE < float(sys.argv[1]) < $PING)" "$cut" ||
  fail "the cut lasted $cut s: not between the lease and the ping timeout"

rcs=()
for p in "$p2" "$p1" "$p3"; do rc=0; wait_bounded 90 "$p"; wait "$p" || rc=$?; rcs+=("$rc"); done
[ "${rcs[*]}" = "0 0 0" ] || { tail -5 "$T"/w*.err; fail "the workers (node2, node1, node3) exited ${rcs[*]}"; }
cat "$T/w2.err"
grep -qF "lost the lease on $shard (taken over by another worker); stopping its attempt" "$T/w2.err" ||
  fail "node2's heartbeat did not find its lease lost"
child=$(awk -v s="/$shard.jsonl" 'index($2, s) { print $1; exit }' "$T/procs.log")
! kill -0 "$child" 2>/dev/null || fail "node2's child $child of $shard still runs"
status=$(json_get "$job/$adir/attempt.json" '["status"]')
[ "$status" = stale ] || fail "node2's attempt of $shard ended $status, expected stale"
rec_token=$(json_get "$job/state/done/$shard.json" '["token"]')
rec_out=$(json_get "$job/state/done/$shard.json" '["output_path"]')
[ "$rec_token" != "$token" ] && [ "${rec_out#"$adir"/}" = "$rec_out" ] ||
  fail "the done record of $shard is node2's partitioned attempt's"
pass "partition: the takeover's token refused node2's heartbeat after the link came back; its child stopped, its attempt stale, nothing published"

run_expect 0 gluster_run check "$BIN" merge --job-dir "$T/mnt/job" --output "$T/out.jsonl"
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
echo "partition: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed"
[ "$done" = 24 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 24 shards"
# Two takers can both move a lock aside when the second judges it through a name its client
# still caches (the first one's new lock goes then, and its attempt is run again): more than
# one takeover is wasted work, not a doubled result, which exactly_once checks.
[ "$takeovers" -ge 1 ] || fail "nobody took $shard over"
exactly_once "$job" --fence || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$T/out.jsonl" || fail "the merged output differs from a run on local disk"
pass "the others took $shard over: every worker exited 0, exactly once, output identical"
