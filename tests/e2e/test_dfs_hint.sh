#!/bin/bash
# A watcher that wrote the hint itself still sees the next one (issue 29): on a GlusterFS volume
# (tests/e2e/gluster.sh, 600 s client caches), two plain workers on clients of their own and a
# job of two shards:
#   - the holder claims the first shard and holds it (its processor waits on a FIFO);
#   - the watcher (--poll-interval-secs 1, the default lease of 120 s) runs the second, then,
#     with nothing left to claim, replaces the hint ("done") itself and watches: the hint it
#     now keeps open is one its own client created, whose cached attributes GlusterFS never
#     invalidates when another client replaces it;
#   - the holder is stopped (SIGTERM: it releases its lock and replaces the hint), and the
#     watcher must claim the shard within 10 s, where the quarter-lease rescan that needs no
#     hint comes after 30 s (before the watcher looked at the hint's folder too, it came after
#     29.7 s, every time). The time is printed against the 2 s target.
# Then the job ends: the watcher runs the shard, both workers exit as they should, and every
# shard is accepted exactly once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
gluster_setup

dfs_input 40
dfs_hold_script
mkfifo "$T/go"
HELD=part-00000-of-00002
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 2
  --process-cmd "$T/hold.sh 0.2 {input} {output}" --job-dir "$T/mnt/job")
gluster_run prep "$BIN" prepare "${COMMON[@]}" >"$T/prep.out" 2>&1 || { cat "$T/prep.out"; fail "prepare failed"; }

held() { [ -n "$(dfs_brick_lock job "$HELD")" ]; }
ESHARD_TEST_HOLD=$T/go gluster_run hold "$BIN" worker --job-dir "$T/mnt/job" --max-shards 1 --no-backup \
  --progress-secs 0 >"$T/hold.out" 2>&1 &
hold_pid=$!
wait_for 60 held
read -r hpid htok _ <<<"$(dfs_brick_lock job "$HELD")"

gluster_run watch "$BIN" worker --job-dir "$T/mnt/job" --no-backup --progress-secs 0 --poll-interval-secs 1 \
  >"$T/watch.out" 2>&1 &
watch_pid=$!
# The watcher ran the second shard and now waits: its "No shard claim available" line comes
# after it replaced the hint; a few polls more and it watches the hint it keeps open.
waiting() { grep -q 'No shard claim available' "$T/watch.out"; }
wait_for 120 waiting
sleep 3
[ -n "$(ls "$GLUSTER_BRICK/job/state/done")" ] || fail "the watcher did not finish the second shard"
read -r wpid _ <<<"$(dfs_brick_lock job part-00001-of-00002 any)"
hint_pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$GLUSTER_BRICK/job/state/hint.json")
[ "$hint_pid" = "$wpid" ] || fail "the hint is not the watcher's ($wpid): $(cat "$GLUSTER_BRICK/job/state/hint.json")"

dfs_release_pickup job "$HELD" "$hpid" "$htok"
pickup=$PICKUP
echo "released shard claimed $pickup s after its lock went (target 2 s)"
awk -v p="$pickup" 'BEGIN { exit !(p <= 10) }' ||
  fail "the released shard was claimed $pickup s after its release, more than 10 s: the watcher missed the hint"
pass "the watcher that wrote the hint last saw the release and claimed the shard after $pickup s"

rc=0
wait "$hold_pid" || rc=$?
[ "$rc" = 143 ] || { cat "$T/hold.out"; fail "the holder exited $rc, not 143 (SIGTERM)"; }
rc=0
wait "$watch_pid" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/watch.out"; fail "the watcher exited $rc"; }
exactly_once "$GLUSTER_BRICK/job" --fence || fail "the accepted results are not one per shard"
pass "both shards accepted once; the holder exited 143, the watcher 0"
