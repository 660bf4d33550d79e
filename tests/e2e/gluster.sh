# shellcheck shell=bash
# A real distributed file system for the end-to-end tests (label dfs): source it after lib.sh
# (and fakehosts.sh for the MPI tests).
#
# GlusterFS (scripts/install-deps.sh installs glusterfs-server and glusterfs-client) runs on one
# machine: glusterd as root, a one-brick volume whose brick is a folder of $T, and one FUSE
# client per "host", each in its own mount namespace, which caches metadata the way production
# clients do (the volume gets the metadata-cache and nl-cache option groups: md-cache and the
# negative-lookup cache for 600 s, with the server's cache invalidation).
#
#   gluster_setup [--short-caches]
#                               starts glusterd when it is not running, creates and starts a
#                               volume of a name unique to this test (tests on different
#                               volumes run in parallel), with the 600 s client caches unless
#                               --short-caches (GlusterFS's defaults: md-cache 1 s, no nl-cache),
#                               and exports:
#     GLUSTER_SERVER GLUSTER_VOL  the server's host name and the volume's name
#     GLUSTER_BRICK             the brick folder (the server's copy: read it, never write it)
#     GLUSTER_PIDS              the folder where every client writes its pid (HOST.pid)
#     GLUSTER_FAKEHOSTS         the value of FAKEHOSTS_GLUSTER that gives every fake host its
#                               own client mount of the volume at $T/mnt
#   gluster_run NAME CMD...     runs CMD as one more client (its mount at $T/mnt, its client's
#                               pid in $GLUSTER_PIDS/NAME.pid)
#   gluster_client_pid NAME     the pid of NAME's client (kill it: that host's mount dies)
#   gluster_brick_pid           the pid of the brick process (kill it: the server goes away)
#   gluster_restart_brick OLD   starts the volume again until a brick other than OLD is online
#   gluster_cli ARGS...         the gluster command, retried while another transaction of
#                               glusterd (another test's) holds its lock
#   dfs_held_by JOB PID [SECS]  the shard PID claimed less than SECS ago (see below)
#   gluster_netns_setup         a network namespace for one client, joined to this one by a
#                               veth pair with addresses of the benchmark range 198.18.0.0/15
#                               (test traffic stays on this machine), and exports GLUSTER_NETNS:
#                               gluster_run with it set runs its client there (gluster-run.sh)
#   gluster_link down|up        cuts that client's link (its end of the pair goes down) or
#                               restores it: a partitioned host
#
# On exit, even on failure, every client of the volume that a test started is killed and the
# volume stopped and deleted, before lib.sh removes $T.

gluster_cli() {
  local i out rc
  for i in $(seq 1 60); do
    rc=0
    out=$(gluster --mode=script "$@" 2>&1) || rc=$?
    case $out in
      *"Another transaction is in progress"* | *"Locking failed"* | *"Connection failed"*) sleep 0.5 ;;
      *) [ -z "$out" ] || echo "$out"; return "$rc" ;;
    esac
  done
  echo "$out"
  return 1
}

gluster_teardown() {
  local f p
  # The test's own background commands (workers on the volume) first: they hold its mounts.
  for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null || true; done
  # The veth pair goes with its namespace once its holder (a background job) and client are
  # gone; delete the pair now in case a process of the namespace outlives them.
  [ -z "${GLUSTER_VETH:-}" ] || ip link del "$GLUSTER_VETH" 2>/dev/null || true
  for f in "$T"/gluster/pids/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    # Only a client of this test's volume: the pid may have been reused since.
    case $( (tr '\0' ' ' <"/proc/$p/cmdline") 2>/dev/null) in
      *"--volfile-id=$GLUSTER_VOL "*) kill -KILL "$p" 2>/dev/null || true ;;
    esac
  done
  if [ -n "${GLUSTER_VOL:-}" ]; then
    gluster_cli volume stop "$GLUSTER_VOL" force >/dev/null 2>&1 || true
    gluster_cli volume delete "$GLUSTER_VOL" >/dev/null 2>&1 ||
      echo "gluster: could not delete the volume $GLUSTER_VOL" >&2
  fi
}

gluster_setup() {
  local i
  for i in glusterd gluster glusterfs; do
    command -v "$i" >/dev/null || fail "$i is missing (scripts/install-deps.sh installs glusterfs-server and glusterfs-client)"
  done
  [ -c /dev/fuse ] || fail "/dev/fuse is missing: the GlusterFS client needs FUSE"
  GLUSTER_SERVER=$(hostname)
  getent hosts "$GLUSTER_SERVER" >/dev/null || fail "this machine's name $GLUSTER_SERVER does not resolve: glusterd needs it"
  # One glusterd serves every test; it stays for the next ones (as a server would). Tests start
  # side by side (ctest -j): a second glusterd started while the first is coming up exits 1, so
  # the start is serialised by a lock (not inherited by the daemon, which would hold it), and a
  # failed start is no failure when one is running.
  if ! pgrep -x glusterd >/dev/null; then
    (
      flock 9
      pgrep -x glusterd >/dev/null || glusterd 9>&- || pgrep -x glusterd >/dev/null
    ) 9>/tmp/eshard-test-glusterd.lock || fail "glusterd did not start"
  fi
  wait_for 30 gluster_cli volume list >/dev/null
  mkdir -p "$T/gluster/brick" "$T/gluster/pids" "$T/mnt"
  GLUSTER_VOL=es_$(basename "$T" | tr -c 'A-Za-z0-9\n' _)
  GLUSTER_BRICK=$T/gluster/brick
  GLUSTER_PIDS=$T/gluster/pids
  trap 'gluster_teardown; test_done' EXIT
  # force: the brick is a folder of the root file system, which glusterd refuses otherwise.
  gluster_cli volume create "$GLUSTER_VOL" "$GLUSTER_SERVER:$GLUSTER_BRICK" force >/dev/null ||
    fail "gluster volume create $GLUSTER_VOL failed"
  if [ "${1:-}" != --short-caches ]; then
    gluster_cli volume set "$GLUSTER_VOL" group metadata-cache >/dev/null || fail "gluster: group metadata-cache"
    gluster_cli volume set "$GLUSTER_VOL" group nl-cache >/dev/null || fail "gluster: group nl-cache"
  fi
  gluster_cli volume start "$GLUSTER_VOL" >/dev/null || fail "gluster volume start $GLUSTER_VOL failed"
  GLUSTER_FAKEHOSTS="$GLUSTER_SERVER $GLUSTER_VOL $T/mnt $GLUSTER_PIDS"
  export GLUSTER_SERVER GLUSTER_VOL GLUSTER_BRICK GLUSTER_PIDS GLUSTER_FAKEHOSTS
  export GLUSTER_CLIENT_LOG=$T/gluster/clients.log
}

gluster_run() {
  local name=$1
  shift
  "$SRC/tests/e2e/gluster-run.sh" "$GLUSTER_SERVER" "$GLUSTER_VOL" "$T/mnt" "$GLUSTER_PIDS/$name.pid" "$@"
}
gluster_client_pid() { cat "$GLUSTER_PIDS/$1.pid"; }
# gluster_on_host NAME CMD...: CMD on the fake host NAME: its own host name (a UTS namespace) and
# its own client mount of the volume at $T/mnt (gluster_run).
gluster_on_host() {
  local h=$1
  shift
  unshare --uts sh -c 'hostname "$0"; exec "$@"' "$h" \
    "$SRC/tests/e2e/gluster-run.sh" "$GLUSTER_SERVER" "$GLUSTER_VOL" "$T/mnt" "$GLUSTER_PIDS/$h.pid" "$@"
}

gluster_netns_setup() {
  local id n a ns
  command -v ip >/dev/null && command -v nsenter >/dev/null || fail "ip (iproute2) and nsenter (util-linux) are missing"
  # No named namespace (that would write /run/netns): a background job holds it.
  unshare --net sleep 100000 &
  ns=/proc/$!/ns/net
  wait_for 10 sh -c '[ "$(readlink "$1")" != "$(readlink /proc/self/ns/net)" ]' sh "$ns"
  id=$(basename "$T" | tr -cd 'A-Za-z0-9')
  GLUSTER_VETH=esp$id
  # A /30 of 198.18.0.0/15 chosen from the test's folder name, so runs side by side differ.
  n=$(printf '%s' "$id" | cksum | cut -d' ' -f1)
  a=198.18.$((n % 256)).$((n / 256 % 64 * 4))
  ip link add "$GLUSTER_VETH" type veth peer name esc$id || fail "cannot create a veth pair (needs root)"
  ip link set "esc$id" netns "$ns" || fail "cannot move esc$id into the client's network namespace"
  ip addr add "${a%.*}.$((${a##*.} + 1))/30" dev "$GLUSTER_VETH"
  ip link set "$GLUSTER_VETH" up
  nsenter --net="$ns" ip addr add "${a%.*}.$((${a##*.} + 2))/30" dev "esc$id"
  nsenter --net="$ns" ip link set "esc$id" up
  nsenter --net="$ns" ip link set lo up
  # The server's name (the volume's brick host) resolves to our end of the pair for that client.
  { echo "${a%.*}.$((${a##*.} + 1)) $GLUSTER_SERVER"; echo "127.0.0.1 localhost"; grep -v "[[:space:]]$GLUSTER_SERVER\([[:space:]]\|$\)" /etc/hosts; } >"$T/gluster/netns-hosts"
  GLUSTER_NETNS="$ns $T/gluster/netns-hosts"
  GLUSTER_NETNS_IF=esc$id
  wait_for 10 nsenter --net="$ns" sh -c "ip -br link show esc$id | grep -qw UP"
}
# Its own end goes down, not ours: with ours down the kernel would route the server's replies to
# the client's address through the default route, out of this machine.
gluster_link() { nsenter --net="${GLUSTER_NETNS%% *}" ip link set "$GLUSTER_NETNS_IF" "$1"; }
# wait_bounded SECS PID: PID (a background job of the test) ends within SECS, or the test fails:
# no process may hang on a file system that went away.
wait_bounded() {
  local i
  for i in $(seq 1 $(($1 * 10))); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
  fail "process $2 still runs after $1 s"
}
gluster_brick_pid() {
  gluster_cli volume status "$GLUSTER_VOL" | awk -v b="$GLUSTER_SERVER:$GLUSTER_BRICK" '$1 == "Brick" && $2 == b { print $NF }'
}

# dfs_held_by JOB PID [SECS]: "SHARD ATTEMPT_DIR TOKEN" of the running lock that process PID
# took less than SECS (default 1; inf: any time) ago (so that its child, if it runs a few
# seconds, still runs for a while), or nothing; JOB is read through the brick (the server's
# copy).
dfs_held_by() {
  python3 - "$1" "$2" "${3:-1}" <<'PY'
import json, os, sys, time
d = os.path.join(sys.argv[1], "state", "locks")
for n in sorted(os.listdir(d) if os.path.isdir(d) else []):
    try:
        l = json.load(open(os.path.join(d, n)))
    except Exception:
        continue
    if (l.get("pid") == int(sys.argv[2]) and l.get("status", "running") == "running"
            and time.time() - l.get("claimed_at_epoch", 0) < float(sys.argv[3])):
        print(l["shard_id"], l["attempt_dir"], l["token"]); break
PY
}

# gluster_restart_brick OLD_PID: start the volume again after its brick process OLD_PID was
# killed. glusterd takes a moment to notice the brick's death; until it does, a force start is
# a no-op: start until a new brick process is online (at most about 30 s).
gluster_restart_brick() {
  local now
  for _ in $(seq 1 60); do
    gluster_cli volume start "$GLUSTER_VOL" force >/dev/null
    now=$(gluster_brick_pid)
    [ -n "$now" ] && [ "$now" != N/A ] && [ "$now" != "$1" ] && return 0
    sleep 0.5
  done
  fail "the brick of $GLUSTER_VOL did not come back within 30 s"
}

# dfs_counts JOB: "attempts shards takeovers superseded done_records backups failed_records"
# from the job folder (read it through the brick, once every client is gone).
dfs_counts() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
att = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json"))]
shards = len(json.load(open(os.path.join(job, "manifest.json")))["shards"])
takeovers = len(os.listdir(os.path.join(job, "state", "stale_locks")))
def records(kind):
    return [n for n in os.listdir(os.path.join(job, "state", kind)) if not n.startswith(".")]
print(len(att), shards, takeovers, sum(a.get("status") == "superseded" for a in att),
      len(records("done")), sum(bool(a.get("backup")) for a in att), len(records("failed")))
PY
}

# dfs_superseded_ok JOB: every superseded attempt is a backup (it lost the race) or a primary
# whose shard's done record is a backup's (a backup started on an overdue shard and won); any
# other superseded primary ran a shard that was already done: a terminal fence did not hold on
# the client cache.
dfs_superseded_ok() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
bad = []
for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json")):
    a = json.load(open(p))
    if a.get("status") != "superseded" or a.get("backup"):
        continue
    rec = json.load(open(os.path.join(job, "state", "done", a["shard_id"] + ".json")))
    won = [b for b in (json.load(open(q)) for q in glob.glob(os.path.join(job, "attempts", a["shard_id"], "*", "attempt.json")))
           if b.get("token") == rec.get("token")]
    if not won or not won[0].get("backup"):
        bad.append(p)
for b in bad:
    print("superseded, not by a backup:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# dfs_plain_run OUT: the reference output, the same job (COMMON, without its processor) run by
# one worker on local disk with a processor that does not sleep.
dfs_plain_run() {
  run_expect 0 "$BIN" prepare "${COMMON[@]}" --process-cmd "$T/proc.sh 0 {input} {output}" --job-dir "$T/plain"
  run_expect 0 "$BIN" worker --job-dir "$T/plain"
  run_expect 0 "$BIN" merge --job-dir "$T/plain" --output "$1"
}

# dfs_input ROWS: $T/in.jsonl, $T/recipe.yaml and $T/proc.sh (a processor that takes SECS, the
# first argument, per shard).
dfs_input() {
  write_recipe "$T/recipe.yaml"
  python3 - "$T/in.jsonl" "$1" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "text": "dfs row %d " % i + "g" * (i % 29)}) + "\n")
PY
  cat >"$T/proc.sh" <<'EOF2'
#!/bin/sh
sleep "$1"
cp "$2" "$3"
EOF2
  chmod +x "$T/proc.sh"
}

# dfs_hold_script: $T/hold.sh SECS IN OUT, a processor that first waits on the FIFO named by
# ESHARD_TEST_HOLD when that is set (bash's read: no process starts while it waits) until the
# test writes to it or stops its worker, then sleeps SECS and copies IN to OUT.
dfs_hold_script() {
  cat >"$T/hold.sh" <<'EOF2'
#!/bin/bash
[ -z "${ESHARD_TEST_HOLD:-}" ] || read -r -t 3600 _ <>"$ESHARD_TEST_HOLD" || true
sleep "$1"
cp "$2" "$3"
EOF2
  chmod +x "$T/hold.sh"
}

# dfs_brick_lock JOB SHARD [any]: "PID TOKEN CLAIMED_AT" of SHARD's running lock in JOB, read at
# the brick (with any: of its lock or fence, which keeps the claim's fields), or nothing.
dfs_brick_lock() {
  python3 - "$GLUSTER_BRICK/$1/state/locks/$2.lock" "${3:-}" <<'PY'
import json, sys
try:
    l = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
if sys.argv[2] == "any" or l.get("status", "running") == "running":
    print(l["pid"], l["token"], l["claimed_at_epoch"])
PY
}

# dfs_release_pickup JOB SHARD PID TOKEN: SIGTERM to the worker PID, which holds SHARD of JOB
# (its lock's token TOKEN), and PICKUP: how long after the lock went (or got another token) the
# next claim was made, that lock's claimed_at_epoch minus the moment the brick was seen without
# the old one (watched every 20 ms, at most 120 s). The test fails when nobody claimed it.
dfs_release_pickup() {
  python3 - "$GLUSTER_BRICK/$1/state/locks/$2.lock" "$4" >"$T/pickup" <<'PY' &
import json, sys, time
path, old = sys.argv[1], sys.argv[2]
gone = None
for _ in range(6000):
    try:
        l = json.load(open(path))
    except Exception:
        l = None
    if gone is None and (l is None or l.get("token") != old):
        gone = time.time()
    if l and l.get("token") != old:
        print("%.3f" % (l["claimed_at_epoch"] - gone))
        break
    time.sleep(0.02)
PY
  local watcher=$!
  sleep 0.5
  kill -TERM "$3"
  wait "$watcher" || true
  PICKUP=$(cat "$T/pickup")
  [ -n "$PICKUP" ] || fail "nobody claimed $2 after its holder released it"
}
