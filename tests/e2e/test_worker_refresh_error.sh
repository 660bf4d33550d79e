#!/bin/bash
# A lease refresh that keeps failing with an error that is not transient (here EROFS: the
# job's state/locks is made read-only under a running shard, in this test's own mount
# namespace; on a shared file system a full disk, a read-only remount or a lock the worker may
# no longer write give ENOSPC, EROFS or EACCES the same way):
#   - the worker warns once, not at every heartbeat;
#   - once the lease can no longer be kept (the outage budget after its last refresh, before
#     the lease runs out) it stops its child, records the attempt preempted (not counted toward
#     the retry limit) and exits 2 with one error line naming the shard and the errno, and that
#     the shard goes to another worker when its lease runs out (the read-only lock cannot be
#     released either);
#   - another worker then takes the shard over and finishes the job: exactly once, no failure.
if [ -z "${ESHARD_REFRESH_NS:-}" ]; then
  # The mounts made here vanish with the namespace, whatever happens to the test.
  exec unshare --mount --propagation private env ESHARD_REFRESH_NS=1 bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
J=$T/job
LOCKS=$J/state/locks
trap 'umount -l "$LOCKS" 2>/dev/null || true; test_done' EXIT

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(20):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
# The processor: records its pid, then runs for 60 s unless $T/fast exists.
cat >"$T/proc.sh" <<EOF
#!/bin/sh
echo \$\$ >"$T/child.pid.tmp" && mv "$T/child.pid.tmp" "$T/child.pid"
[ -e "$T/fast" ] || sleep 60
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 2 \
  --process-cmd "$T/proc.sh {input} {output}" --heartbeat-secs 1 --lease-secs 6
SHARD=part-00000-of-00002

"$BIN" worker --job-dir "$J" --poll-interval-secs 1 >"$T/w1.out" 2>"$T/w1.err" &
w1=$!
wait_for 30 test -s "$T/child.pid"
child=$(cat "$T/child.pid")
# Read-only from now on. A remount fails (EBUSY) while the worker holds a lock open for writing
# (for a heartbeat's few milliseconds): try again.
mount --bind "$LOCKS" "$LOCKS"
readonly_locks() { mount -o remount,bind,ro "$LOCKS" 2>/dev/null; }
wait_for 10 readonly_locks
t0=$(now)
# The budget is the lease minus two heartbeats (4 s); the child would run for 60 s.
rc=0
ends_within() {
  local i
  for i in $(seq 1 $(($1 * 10))); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
  cat "$T/w1.err"
  kill -KILL "$2"
  fail "the worker still runs $1 s after its locks became read-only"
}
ends_within 30 "$w1"
wait "$w1" || rc=$?
dt=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) - float(sys.argv[2])))" "$(now)" "$t0")
cat "$T/w1.err"
[ "$rc" = 2 ] || fail "the worker whose lease could not be refreshed exited $rc, expected 2"
! kill -0 "$child" 2>/dev/null || fail "its child $child still runs"
n=$(grep -c "WARNING: cannot refresh the lease of $SHARD" "$T/w1.err" || true)
[ "$n" = 1 ] || fail "the failing refresh was warned about $n times, expected once"
[ "$(grep -c ERROR "$T/w1.err")" = 1 ] || fail "expected exactly one error line"
grep ERROR "$T/w1.err" | grep -F "ERROR: cannot refresh the lease of $SHARD" | grep -F "Read-only file system (errno 30)" |
  grep -qF "the shard goes to another worker when its lease runs out; this worker stops" ||
  fail "the error does not say the shard, the errno and what happens to the shard"
st=$(json_get "$(ls -d "$J/attempts/$SHARD"/0001-*)/attempt.json" '["status"]')
[ "$st" = preempted ] || fail "the stopped attempt says $st, expected preempted"
pass "a read-only lock: warned once, child stopped, attempt preempted, exit 2 after $dt s with one error line"

umount "$LOCKS"
touch "$T/fast"
run_expect 0 "$BIN" worker --job-dir "$J" --poll-interval-secs 1
[ -z "$(ls "$J/state/failed")" ] || fail "a failed record"
exactly_once "$J" --fence --uncounted || fail "the accepted results are not one per shard, or an attempt counted as failed"
pass "another worker took $SHARD over after the lease: exactly once, nothing counted as failed"
