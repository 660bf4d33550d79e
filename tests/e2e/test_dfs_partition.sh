#!/bin/bash
# A partitioned host: workers on a GlusterFS volume (tests/e2e/gluster.sh) with the 600 s client
# caches; the client of the partitioned host reaches the server over a veth pair from a network
# namespace of its own (its worker keeps the normal network). While that host's shard runs, its
# link is cut until another worker has taken the shard over, then restored.
#   1. A ping timeout longer than the cut (GlusterFS's default, 42 s; the lease is 8 s): node1's
#      calls hang instead of failing, as on an NFS hard mount, so its worker can neither
#      refresh its lease nor notice anything.
#      - another worker takes the shard over once the lease runs out;
#      - node1 is refused before it could publish, by whichever check returns first: its
#        worker's tick (twice a second while the child runs) looks for another attempt's done
#        record (once the attempt is 2 s old, for backups) and refreshes the lease every
#        heartbeat; the first of these calls after the cut hangs in an open() (an open always
#        asks the server), and the worker does nothing else until the link returns. Then that open
#        resolves its name on the server: a lease refresh finds the taker's lock, whose token
#        is not node1's, and reports the lease lost (the attempt stays "stale", as the
#        takeover marked it); a look finds the taker's done record once the taker published,
#        and the attempt ends "superseded". Either way node1 stops its child and publishes
#        nothing;
#      - every worker exits 0 within a bound.
#   2. A ping timeout shorter than the lease minus two heartbeats (6 s against 16 s and 2 s):
#      node4's heartbeat hangs until the ping timer gives up (6 to 12 s), then fails ENOTCONN.
#      Its outage budget counts from its last lease refresh, so it stops its child and exits 2
#      (one error naming the job folder and errno 107) before its lease runs out and another
#      worker takes the shard over: never two copies of the shard at once.
# Both: exactly one done record per shard, the taker's; no failed record; the merged output is
# byte-identical to a run on local disk. The other workers run with --no-backup: a backup of
# the cut-off shard would win before the lease runs out, and the shard would not be taken over
# (test_dfs_faults.sh tries backups).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup
gluster_netns_setup

dfs_input 240
# proc.sh, each child's pid, input and output logged on local disk; SLOW_ONCE=DIR (in a worker's
# environment): its first child takes 120 s (the shard cut off), the ones after it (claimed once
# its link is back, on a loaded machine) as long as the others'.
cat >"$T/proc-log.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$2 \$3" >>$T/procs.log
secs=\$1
if [ -n "\${SLOW_ONCE:-}" ] && mkdir "\$SLOW_ONCE" 2>/dev/null; then secs=120; fi
exec $T/proc.sh "\$secs" "\$2" "\$3"
EOF2
chmod +x "$T/proc-log.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 24)
dfs_plain_run "$T/plain.jsonl"

# worker W [VAR=VALUE...] [-- OPTIONS...]: a worker of $JOB through its own client (the cut-off
# one's in the namespace), in the background, with VAR=VALUE in its environment and more OPTIONS.
worker() {
  local w=$1 envs=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  env "${envs[@]}" "$SRC/tests/e2e/gluster-run.sh" "$GLUSTER_SERVER" "$GLUSTER_VOL" "$T/mnt" "$GLUSTER_PIDS/node$w.pid" \
    sh -c 'echo $$ >"$0"; exec "$@"' "$T/w$w.pid" "$BIN" worker --job-dir "$T/mnt/$JOB" --poll-interval-secs 1 \
    --progress-secs 0 "$@" >"$T/w$w.out" 2>"$T/w$w.err" &
}
# lock_of PID: "SHARD ATTEMPT_DIR TOKEN" of the running lock worker PID holds (read on the brick).
lock_of() { dfs_held_by "$GLUSTER_BRICK/$JOB" "$1" inf; }
holds_lock() { [ -n "$(lock_of "$1")" ]; }
secs() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }

# partition W PING HB LEASE: prepares $JOB, starts worker W (cut off, its first child slow) and,
# once it holds a shard, cuts its link and starts the workers W+1 and W+2; returns once the
# lease of W's shard ran out and another worker took it over (the link still cut), with
# shard, adir, token (W's lock), pW, pA, pB (the workers' pids), t0 and t1 (the cut and the
# takeover).
partition() {
  local w=$1 ping=$2 hb=$3 lease=$4
  gluster_cli volume set "$GLUSTER_VOL" network.ping-timeout "$ping" >/dev/null || fail "gluster: network.ping-timeout"
  run_expect 0 gluster_run prep "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/$JOB" \
    --process-cmd "$T/proc-log.sh 0.3 {input} {output}" --heartbeat-secs "$hb" --lease-secs "$lease"
  worker "$w" GLUSTER_NETNS="$GLUSTER_NETNS" SLOW_ONCE="$T/slow.$w"
  pW=$!
  wait_for 20 test -s "$T/w$w.pid"
  wait_for 30 holds_lock "$(cat "$T/w$w.pid")"
  read -r shard adir token <<<"$(lock_of "$(cat "$T/w$w.pid")")"
  # Its client talks to the server through the pair, not through this namespace's loopback.
  nsenter --net="${GLUSTER_NETNS%% *}" ss -tnH state established | grep -q . ||
    fail "node$w's client has no connection in its own network namespace"
  gluster_link down
  t0=$(now)
  echo "node$w's link cut under $shard (its attempt $adir); ping timeout $ping s, lease $lease s"
  # They start after the cut: they see W's lock unchanged for the lease from then on.
  worker $((w + 1)) -- --no-backup && pA=$!
  worker $((w + 2)) -- --no-backup && pB=$!
  wait_for 90 compgen -G "$GLUSTER_BRICK/$JOB/state/stale_locks/$shard.*" >/dev/null
  t1=$(now)
}
# settled W: the workers end within a bound; exactly once, no failure, the done record not W's,
# output identical. Prints the counts.
settled() {
  local w=$1 job=$GLUSTER_BRICK/$JOB rc
  rcs=()
  for p in "$pW" "$pA" "$pB"; do rc=0; wait_bounded 90 "$p"; wait "$p" || rc=$?; rcs+=("$rc"); done
  child=$(awk -v s="/$shard.jsonl" -v a="/$adir/" 'index($2, s) && index($3, a) { print $1 }' "$T/procs.log")
  [ -n "$child" ] || fail "no child of node$w's attempt was logged"
  ! kill -0 "$child" 2>/dev/null || fail "node$w's child $child of $shard still runs"
  [ "$(json_get "$job/state/done/$shard.json" '["token"]')" != "$token" ] ||
    fail "the done record of $shard is node$w's cut-off attempt's"
  run_expect 0 gluster_run check "$BIN" merge --job-dir "$T/mnt/$JOB" --output "$T/$JOB.jsonl"
  read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
  echo "partition ($JOB): attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed"
  [ "$done" = 24 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 24 shards"
  # Two takers can both move a lock aside when the second judges it through a name its client
  # still caches (the first one's new lock goes then, and its attempt is run again): more than
  # one takeover is wasted work, not a doubled result, which exactly_once checks.
  [ "$takeovers" -ge 1 ] || fail "nobody took $shard over"
  exactly_once "$job" --fence || fail "the accepted results are not one per shard"
  cmp "$T/plain.jsonl" "$T/$JOB.jsonl" || fail "the merged output differs from a run on local disk"
}

# ---- 1. the calls hang for the whole cut: the heartbeat after it is refused
JOB=job LEASE=8 PING=42
partition 1 $PING 1 $LEASE
kill -0 "$pW" || fail "node1's worker ended during the cut"
taker_done=$(test -e "$GLUSTER_BRICK/$JOB/state/done/$shard.json" && echo yes || echo no)
gluster_link up
echo "taken over $(secs "$t0" "$t1") s after the cut; the taker's record there: $taker_done; link up"
[ "$(secs "$t0" "$t1" | cut -d. -f1)" -lt $PING ] || fail "the takeover came after the ping timeout"
settled 1
[ "${rcs[*]}" = "0 0 0" ] || { tail -5 "$T"/w[123].err; fail "the workers (node1, node2, node3) exited ${rcs[*]}"; }
cat "$T/w1.err"
status=$(json_get "$GLUSTER_BRICK/$JOB/$adir/attempt.json" '["status"]')
if grep -qF "lost the lease on $shard (taken over by another worker); stopping its attempt" "$T/w1.err"; then
  [ "$status" = stale ] || fail "node1's attempt of $shard ended $status after its lease was lost, expected stale"
  refused="its lease refresh (the taker's token in the lock)"
else
  [ "$status" = superseded ] || fail "node1's attempt of $shard ended $status, but neither its lease refresh nor the taker's record refused it"
  refused="its look for another done record (the taker's)"
fi
pass "partition, hung calls: when the link came back $refused refused node1; its child stopped, nothing of it published; exactly once, output identical"

# ---- 2. the calls fail after the ping timeout: the worker gives up before its lease runs out
JOB=job2
partition 4 6 2 16
# The lease ran out here, and another worker took over: by then node4 must have stopped.
kill -0 "$pW" 2>/dev/null && fail "node4's worker still ran its shard when its lease ran out ($(secs "$t0" "$t1") s after the cut)"
gluster_link up
echo "taken over $(secs "$t0" "$t1") s after the cut; node4 had stopped; link up"
settled 4
[ "${rcs[*]}" = "2 0 0" ] || { tail -5 "$T"/w[456].err; fail "the workers (node4, node5, node6) exited ${rcs[*]}, expected 2 0 0"; }
cat "$T/w4.err"
grep ERROR "$T/w4.err" | tail -1 | grep -qF "ERROR: the job folder $T/mnt/$JOB cannot be reached: Transport endpoint is not connected (errno 107)" ||
  fail "node4's last error does not name the job folder and the errno"
pass "partition, failing calls: node4 stopped its child and exited 2 before its lease ran out; exactly once, output identical"
