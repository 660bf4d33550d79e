#!/bin/bash
# Two takers of one stale lock through two GlusterFS clients with the 600 s client caches
# (tests/e2e/gluster.sh): the second taker must not move the first taker's fresh lock.
#
# A takeover judges the lock through its client (the path names the inode it holds open and
# flocked, the lock is stale), then renames it by name, which the file server answers. A FUSE
# client answers the name from its cache for its entry timeout: a taker that looks within about
# a second of another host's takeover still sees the old lock at the name, while the server's
# name leads to the first taker's new lock. The rename then moved that new lock, and the check
# after it read the destination through the same cache (the client had moved its cached name of
# the old lock there), so it passed: a double takeover, the first taker's attempt lost, an extra
# attempt run (seen 3 times in about 25 runs of test_dfs_* with takeovers).
#
# Made to happen every run: node0's worker dies holding the shard's lock; node2's worker judges
# it stale after the lease and, at its takeover's last step before the rename (test hook
# ESHARD_TEST_HOOK_BEFORE_TAKEOVER), lets node1 take the lock over first through node1's own
# client, as a worker does: the lock's end marker (docs/job-folder.md, "Lock end markers"), the
# rename to state/stale_locks, a new running lock, refreshed every 0.5 s. Then node2 goes on with
# its name of the lock still cached. Checked on the brick (the server's copy): node1's lock is
# still at its name, running, and not in state/stale_locks; node2's takeover was a lost race.
# Then node1 stops refreshing and goes, and a taker of its lock dies after making the lock's end
# marker: node2 takes the lock over after the lease all the same, and finishes: exactly once,
# output identical to local disk.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
need_test_hooks
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
gluster_setup

dfs_input 20
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 1)
dfs_plain_run "$T/plain.jsonl"
S=part-00000-of-00001
J=$T/mnt/job
B=$GLUSTER_BRICK/job

# on_host NAME CMD...: CMD on the fake host NAME, with its own host name and client mount.
on_host() {
  local h=$1
  shift
  unshare --uts sh -c 'hostname "$0"; exec "$@"' "$h" \
    "$SRC/tests/e2e/gluster-run.sh" "$GLUSTER_SERVER" "$GLUSTER_VOL" "$T/mnt" "$GLUSTER_PIDS/$h.pid" "$@"
}
run_expect 0 on_host prep "$BIN" prepare "${COMMON[@]}" --job-dir "$J" --process-cmd "$T/proc.sh 1 {input} {output}" \
  --heartbeat-secs 0.5 --lease-secs 3 --poll-interval-secs 1

# node0 dies holding the shard (its child running).
rc=0
on_host node0 env ESHARD_TEST_CRASH_AT=worker-child-running "$BIN" worker --job-dir "$J" --progress-secs 0 \
  >"$T/node0.out" 2>"$T/node0.err" || rc=$?
[ "$rc" = 99 ] || { cat "$T/node0.err"; fail "node0's worker exited $rc, not at its crash point (99)"; }
T0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$B/state/locks/$S.lock")

# node1, the first taker: when node2 is about to rename ($T/go), take the lock over through its
# own client as a worker does, say so ($T/taken, its lock's token), then refresh its lock every
# 0.5 s until $T/stop.
cat >"$T/taker1.py" <<'PY'
import json, os, sys, time, uuid
job, sid, t = sys.argv[1:4]
lock = os.path.join(job, "state", "locks", sid + ".lock")
while not os.path.exists(os.path.join(t, "go")):
    time.sleep(0.02)
old = json.load(open(lock))
line = lambda d: json.dumps(d, sort_keys=True) + "\n"
ends = os.path.join(job, "state", "lock_ends")
os.makedirs(ends, exist_ok=True)
fd = os.open(os.path.join(ends, "%s.%s" % (sid, old["token"])), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.write(fd, line({"action": "takeover", "at": "", "hostname": "node1", "pid": os.getpid()}).encode())
os.close(fd)
att = os.path.join(job, old["attempt_dir"], "attempt.json")
a = json.load(open(att))
a.update(status="stale", stale_at="")
open(att + ".tmp", "w").write(json.dumps(a, indent=2, sort_keys=True) + "\n")
os.rename(att + ".tmp", att)
os.rename(lock, os.path.join(job, "state", "stale_locks", "%s.%d.%s.lock" % (sid, time.time(), uuid.uuid4().hex)))
tok = uuid.uuid4().hex
new = {"attempt_dir": "attempts/%s/0002-%s" % (sid, tok), "attempt_number": 2, "claimed_at": "",
       "claimed_at_epoch": time.time(), "heartbeat": 0, "hostname": "node1", "lease_secs": 3.0,
       "pid": os.getpid(), "shard_id": sid, "status": "running", "token": tok}
fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL)
os.write(fd, line(new).encode())
os.fsync(fd)
open(os.path.join(t, "taken.tmp"), "w").write(tok)
os.rename(os.path.join(t, "taken.tmp"), os.path.join(t, "taken"))
while not os.path.exists(os.path.join(t, "stop")):
    time.sleep(0.5)
    new["heartbeat"] += 1
    data = line(new).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.fsync(fd)
# A taker of node1's lock that dies after its end marker, before its rename: the lock stays.
fd = os.open(os.path.join(ends, "%s.%s" % (sid, tok)), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.write(fd, line({"action": "takeover", "at": "", "hostname": "node3", "pid": 1}).encode())
os.close(fd)
PY
on_host node1 python3 "$T/taker1.py" "$J" "$S" "$T" >"$T/node1.out" 2>"$T/node1.err" &
N1=$!

# node2, the second taker: its first takeover waits, just before its rename, for node1's.
HOOK="[ -e $T/go ] || { touch $T/go; while [ ! -e $T/taken ]; do sleep 0.02; done; }"
on_host node2 env ESHARD_TEST_HOOK_BEFORE_TAKEOVER="$HOOK" "$BIN" worker --job-dir "$J" --no-backup \
  --progress-secs 0 >"$T/node2.out" 2>"$T/node2.err" &
N2=$!
wait_for 60 test -e "$T/taken"
T1=$(cat "$T/taken")
# node2 has gone on past its rename once its hook has ended; give it 2 s, then read the brick.
sleep 2
python3 - "$B" "$S" "$T1" <<'PY' || { cat "$T/node2.err"; fail "node2 took over node1's fresh lock (token $T1): a double takeover"; }
import glob, json, os, sys
job, sid, t1 = sys.argv[1:4]
lock = json.load(open(os.path.join(job, "state", "locks", sid + ".lock")))
moved = [p for p in glob.glob(os.path.join(job, "state", "stale_locks", "*.lock")) if json.load(open(p)).get("token") == t1]
print("at the name: %s (%s); node1's lock in stale_locks: %d" % (lock.get("token"), lock.get("hostname"), len(moved)))
sys.exit(0 if lock.get("token") == t1 and not moved else 1)
PY
pass "node2, with node0's lock at its name in its cache, left node1's fresh lock alone"

# node1 goes, and a taker of its lock dies after the lock's end marker, before its rename:
# node2 takes the lock over after the lease all the same (the lock is still listed under its
# name with the same inode number) and finishes the job.
touch "$T/stop"
wait_bounded 30 "$N1"
wait "$N1" || { cat "$T/node1.err"; fail "node1's taker failed"; }
wait_bounded 120 "$N2"
wait "$N2" || { cat "$T/node2.err"; fail "node2's worker failed"; }
run_expect 0 on_host check "$BIN" merge --job-dir "$J" --output "$T/out.jsonl"
exactly_once "$B" --fence || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$T/out.jsonl" || fail "the merged output differs from a run on local disk"
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$B")"
echo "attempts=$attempts takeovers=$takeovers superseded=$superseded done=$done failed=$failed"
[ "$takeovers" = 2 ] && [ "$superseded" = 0 ] && [ "$done" = 1 ] ||
  fail "$takeovers takeovers (node0's by node1, node1's by node2), $superseded superseded, $done done records"
pass "node2 took node1's lock over after its lease: exactly once, output identical"
