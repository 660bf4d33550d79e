#!/bin/bash
# A lock ended twice through GlusterFS clients with the 600 s client caches (tests/e2e/gluster.sh):
# a takeover or a release must not move or remove the lock another host has just put at the name.
#
# A takeover judges the lock through its client (the path names the inode it holds open and
# flocked, the lock is stale), then renames it by name, which the file server answers. A FUSE
# client answers the name from its cache for its entry timeout: a taker that looks within about
# a second of another host's takeover still sees the old lock at the name, while the server's
# name leads to the first taker's new lock. The rename then moved that new lock, and the check
# after it read the destination through the same cache (the client had moved its cached name of
# the old lock there), so it passed: a double takeover, the first taker's attempt lost, an extra
# attempt run (seen 3 times in about 25 runs of test_dfs_* with takeovers). A release checks its
# token through the name in the same way and removes the lock by name.
#
# Made to happen every run, through test hooks that stop a worker at its last step before the
# rename (ESHARD_TEST_HOOK_BEFORE_TAKEOVER) or the unlink (ESHARD_TEST_HOOK_BEFORE_RELEASE) while
# another host takes the lock over through its own client, as a worker does (the lock's end
# marker, docs/job-folder.md "Lock end markers"; the attempt marked stale; the rename to
# state/stale_locks; a new running lock, refreshed every 0.5 s). Then the stopped worker goes on
# with its name of the lock still cached. Checked on the brick (the server's copy): the other
# host's lock is still at the name, and not in state/stale_locks. Then that host stops refreshing
# and goes, and a taker of its lock dies after making the lock's end marker: the worker takes the
# lock over after the lease all the same and finishes: exactly once, output identical to local
# disk.
#   1. takeover: node0's worker dies holding the shard; node2's worker takes the lock over after
#      the lease, and node1 takes it over first;
#   2. release: node3's worker holds the shard, its processor fails (first time only), and it
#      releases the lock for a retry; node4 takes the lock over first.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
need_test_hooks
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup

dfs_input 20
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 1)
dfs_plain_run "$T/plain.jsonl"
S=part-00000-of-00001
cat >"$T/fail-once.sh" <<EOF
#!/bin/sh
[ -e "$T/failed-once" ] || { touch "$T/failed-once"; exit 1; }
cp "\$1" "\$2"
EOF
chmod +x "$T/fail-once.sh"

for j in takeover release; do
  proc="$T/proc.sh 1 {input} {output}"
  [ $j = takeover ] || proc="$T/fail-once.sh {input} {output}"
  run_expect 0 gluster_on_host prep "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/$j" --process-cmd "$proc" \
    --heartbeat-secs 0.5 --lease-secs 3 --poll-interval-secs 1
done

# The first taker, on host NAME: when the worker is about to end the lock of job JOB ($T/JOB.go),
# take the lock over through its own client as a worker does, say so ($T/JOB.taken, its lock's
# token), then refresh its lock every 0.5 s until $T/JOB.stop; then a taker of its lock dies
# after the lock's end marker.
cat >"$T/taker.py" <<'PY'
import json, os, sys, time, uuid
job, sid, flag, me = sys.argv[1:5]
lock = os.path.join(job, "state", "locks", sid + ".lock")
while not os.path.exists(flag + ".go"):
    time.sleep(0.02)
line = lambda d: json.dumps(d, sort_keys=True) + "\n"
def end_marker(token, host):
    fd = os.open(os.path.join(job, "state", "lock_ends", "%s.%s" % (sid, token)), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.write(fd, line({"action": "takeover", "at": "", "hostname": host, "pid": os.getpid()}).encode())
    os.close(fd)
old = json.load(open(lock))
os.makedirs(os.path.join(job, "state", "lock_ends"), exist_ok=True)
end_marker(old["token"], me)
att = os.path.join(job, old["attempt_dir"], "attempt.json")
a = json.load(open(att))
if a.get("status") == "running":
    a.update(status="stale", stale_at="")
    open(att + ".tmp", "w").write(json.dumps(a, indent=2, sort_keys=True) + "\n")
    os.rename(att + ".tmp", att)
os.rename(lock, os.path.join(job, "state", "stale_locks", "%s.%d.%s.lock" % (sid, time.time(), uuid.uuid4().hex)))
tok = uuid.uuid4().hex
new = {"attempt_dir": "attempts/%s/0009-%s" % (sid, tok), "attempt_number": 9, "claimed_at": "",
       "claimed_at_epoch": time.time(), "heartbeat": 0, "hostname": me, "lease_secs": 3.0,
       "pid": os.getpid(), "shard_id": sid, "status": "running", "token": tok}
fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL)
os.write(fd, line(new).encode())
os.fsync(fd)
open(flag + ".tmp", "w").write(tok)
os.rename(flag + ".tmp", flag + ".taken")
while not os.path.exists(flag + ".stop"):
    time.sleep(0.5)
    new["heartbeat"] += 1
    data = line(new).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.fsync(fd)
end_marker(tok, "a-taker-that-died")
PY
# hook JOB: the worker's first end of job JOB's lock waits, just before its rename or unlink, for
# the first taker's.
hook() { echo "[ -e $T/$1.go ] || { touch $T/$1.go; while [ ! -e $T/$1.taken ]; do sleep 0.02; done; }"; }
# the lock at the name and node1's lock in stale_locks, read on the brick: the first taker's
# lock ($T/JOB.taken) must be still at the name.
first_lock_kept() {
  python3 - "$GLUSTER_BRICK/$1" "$S" "$(cat "$T/$1.taken")" <<'PY'
import glob, json, os, sys
job, sid, t1 = sys.argv[1:4]
try:
    lock = json.load(open(os.path.join(job, "state", "locks", sid + ".lock")))
except FileNotFoundError:
    lock = {}
moved = [p for p in glob.glob(os.path.join(job, "state", "stale_locks", "*.lock")) if json.load(open(p)).get("token") == t1]
print("at the name: %s (%s); the first taker's lock in stale_locks: %d" % (lock.get("token"), lock.get("hostname"), len(moved)))
sys.exit(0 if lock.get("token") == t1 and not moved else 1)
PY
}

# 1. node0 dies holding the shard (its child running); node2 takes it over, node1 first.
rc=0
gluster_on_host node0 env ESHARD_TEST_CRASH_AT=worker-child-running "$BIN" worker --job-dir "$T/mnt/takeover" --progress-secs 0 \
  >"$T/node0.out" 2>"$T/node0.err" || rc=$?
[ "$rc" = 99 ] || { cat "$T/node0.err"; fail "node0's worker exited $rc, not at its crash point (99)"; }
gluster_on_host node1 python3 "$T/taker.py" "$T/mnt/takeover" "$S" "$T/takeover" node1 >"$T/node1.out" 2>"$T/node1.err" &
TAKER1=$!
gluster_on_host node2 env ESHARD_TEST_HOOK_BEFORE_TAKEOVER="$(hook takeover)" "$BIN" worker --job-dir "$T/mnt/takeover" \
  --no-backup --progress-secs 0 >"$T/node2.out" 2>"$T/node2.err" &
W1=$!
# 2. node3 releases the shard after its failure; node4 takes it over first.
gluster_on_host node4 python3 "$T/taker.py" "$T/mnt/release" "$S" "$T/release" node4 >"$T/node4.out" 2>"$T/node4.err" &
TAKER2=$!
gluster_on_host node3 env ESHARD_TEST_HOOK_BEFORE_RELEASE="$(hook release)" "$BIN" worker --job-dir "$T/mnt/release" \
  --no-backup --progress-secs 0 >"$T/node3.out" 2>"$T/node3.err" &
W2=$!

for j in takeover release; do
  wait_for 60 test -e "$T/$j.taken"
  # The worker goes on past its rename or unlink once its hook has ended; give it 2 s.
  sleep 2
  first_lock_kept $j || { cat "$T/node2.err" "$T/node3.err"; fail "$j: the worker ended the lock another host had just put at the name"; }
  touch "$T/$j.stop"
done
pass "a takeover and a release, each with the old lock at its name in its client's cache, left the new lock alone"

wait_bounded 30 "$TAKER1"
wait_bounded 30 "$TAKER2"
wait "$TAKER1" && wait "$TAKER2" || { cat "$T/node1.err" "$T/node4.err"; fail "a first taker failed"; }
wait_bounded 120 "$W1"
wait "$W1" || { cat "$T/node2.err"; fail "node2's worker failed"; }
wait_bounded 120 "$W2"
wait "$W2" || { cat "$T/node3.err"; fail "node3's worker failed"; }
for j in takeover release; do
  run_expect 0 gluster_on_host check "$BIN" merge --job-dir "$T/mnt/$j" --output "$T/out-$j.jsonl"
  exactly_once "$GLUSTER_BRICK/$j" --fence || fail "$j: the accepted results are not one per shard"
  cmp "$T/plain.jsonl" "$T/out-$j.jsonl" || fail "$j: the merged output differs from a run on local disk"
  read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$GLUSTER_BRICK/$j")"
  echo "$j: attempts=$attempts takeovers=$takeovers superseded=$superseded done=$done failed=$failed"
  # Two takeovers: the first taker's, and the worker's of the first taker's lock.
  [ "$attempts" = 2 ] && [ "$takeovers" = 2 ] && [ "$superseded" = 0 ] && [ "$done" = 1 ] && [ "$failed" = 0 ] ||
    fail "$j: $attempts attempts, $takeovers takeovers, $superseded superseded, $done done and $failed failed records"
done
pass "each worker took the first taker's lock over after its lease, past a dead taker's end marker: exactly once, output identical"
