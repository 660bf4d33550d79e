#!/usr/bin/env bash
# Per-rank Ray heads (src/ray.c) with the real `ray` of .venv-dj: two "ranks" of one host start
# their heads at once, get different ports and addresses, a Ray driver runs a task on one of
# them, a third start while both run must avoid their ports, a head whose raylet was killed is
# reported dead, and after stop nothing of any head is left (process group, token, temp dir).
# A rank that dies without stopping its head takes the head down with it (the watchdog).
# Driver: tests/dj/ray_head_driver.c, compiled here against the built libeshard.a.
. "$(dirname "$0")/../e2e/lib.sh"

VENV=${ESHARD_DJ_VENV:-$SRC/.venv-dj}
if [ ! -x "$VENV/bin/ray" ]; then
  bash "$SRC/scripts/setup-dj-env.sh" "$VENV" >/dev/null || fail "cannot set up $VENV"
fi
RAY=$VENV/bin/ray
BUILD=$(dirname "$BIN")
[ -f "$BUILD/libeshard.a" ] || fail "no libeshard.a in $BUILD"
# A sanitizer build's library needs the sanitizer runtimes at link time.
san=()
if nm "$BUILD/libeshard.a" 2>/dev/null | grep '__asan_\|__ubsan_' >/dev/null; then san=(-fsanitize=address,undefined); fi
gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror "${san[@]}" -I"$SRC/include" \
  "$SRC/tests/dj/ray_head_driver.c" "$BUILD/libeshard.a" \
  -lssl -lcrypto -lcjson -lyaml -lpthread -lm -o "$T/driver" || fail "cannot build the driver"

# Ray's sockets live under the temp dir: keep the base short, whatever TMPDIR is.
BASE=$(mktemp -d /tmp/esray.XXXXXX)
export RAY_USAGE_STATS_ENABLED=0
unset RAY_ADDRESS RAY_worker_niceness

# Live (non-zombie) processes that carry one of the tokens or name one of the temp dirs.
leftovers() {
  python3 - "$@" <<'PY'
import os, sys
keys = [a.encode() for a in sys.argv[1:] if a]
for pid in filter(str.isdigit, os.listdir('/proc')):
    if int(pid) == os.getpid():
        continue  # its own argv holds the keys
    try:
        stat = open(f'/proc/{pid}/stat', 'rb').read()
        if stat[stat.rindex(b')') + 2:][:1] in (b'Z', b'X'):
            continue
        blob = open(f'/proc/{pid}/environ', 'rb').read() + b'\0' + open(f'/proc/{pid}/cmdline', 'rb').read()
    except OSError:
        continue
    if any(k in blob for k in keys):
        print(pid, stat[stat.index(b'(') + 1:stat.rindex(b')')].decode(errors='replace'))
PY
}
kv() { sed -n "s/^$2=//p" "$1"; }

cleanup_all() {
  # Never leave a head behind, even when an assertion failed half way.
  if [ -f "$T/racer.pid" ]; then kill "$(cat "$T/racer.pid")" 2>/dev/null || true; fi
  for f in "$T"/r*/info "$T"/f*/info; do
    [ -f "$f" ] || continue
    local pg tok
    pg=$(kv "$f" pgid); tok=$(kv "$f" token)
    if [ -n "$(leftovers "ESHARD_RAY_HEAD=$tok")" ]; then kill -KILL -- "-$pg" 2>/dev/null || true; fi
  done
  rm -rf "$BASE"
  test_done
}
trap cleanup_all EXIT

start_driver() { # DIR RANK RANKS [extra...]
  local d=$1 r=$2 n=$3; shift 3
  mkdir -p "$d"
  "$T/driver" --ray "$RAY" --base "$BASE" --rank "$r" --ranks "$n" --dir "$d" "$@" \
    >"$d/out" 2>"$d/err" &
  echo $! >"$d/pid"
}
wait_file() { # FILE DIR SECS
  local i=0
  while [ ! -f "$1" ]; do
    if [ -f "$2/error" ]; then cat "$2/err"; fail "head start failed: $(cat "$2/error")"; fi
    i=$((i + 1)); [ "$i" -lt $(($3 * 10)) ] || { cat "$2/err"; fail "timed out waiting for $1"; }
    sleep 0.1
  done
}

# 0. Start failures are reported with their cause and leave nothing behind.
printf '#!/bin/sh\necho "fake ray: cannot start" >&2\nexit 3\n' >"$T/fake-ray"; chmod +x "$T/fake-ray"
mkdir -p "$T/f1" "$T/f2" "$T/f3"
run_expect 2 "$T/driver" --ray "$T/fake-ray" --base "$BASE" --rank 0 --ranks 1 --dir "$T/f1"
grep -qF "exited with status 3; last output: fake ray: cannot start" "$T/f1/error" || fail "bad error: $(cat "$T/f1/error")"
# Tried once more (a loaded node's `ray start` can fail for no fault), then the error, once.
[ "$(grep -c "starting the Ray head once more" "$T/err")" = 1 ] || fail "expected one retry warning: $(cat "$T/err")"
[ "$(grep -c "ERROR: .*exited with status 3" "$T/err")" = 1 ] || fail "expected the error once: $(cat "$T/err")"
[ -z "$(ls -A "$BASE")" ] || fail "a failed start left $(ls -A "$BASE")"
run_expect 2 "$T/driver" --ray "$T/no-such-ray" --base "$BASE" --rank 0 --ranks 1 --dir "$T/f2"
grep -qF "is not an executable file" "$T/f2/error" || fail "bad error: $(cat "$T/f2/error")"
run_expect 2 "$T/driver" --ray "$RAY" --base "$BASE/a-base-folder-that-is-much-too-long" --rank 0 --ranks 1 --dir "$T/f3"
grep -qF "limited to 107 bytes" "$T/f3/error" || fail "bad error: $(cat "$T/f3/error")"
run_expect 2 "$T/driver" --ray "$RAY" --base "$BASE" --rank 2 --ranks 2 --dir "$T/f3"
expect_err "rank on host 2 is not in 0..1"
pass "start failures: ray exits 3, no ray, temp dir too long, bad rank"

# 0b. Someone else binds the chosen block between the bind test and `ray start` (another job's
#     head with the same rank number starting at the same moment): the start moves on to the
#     rank's next block. The wrapper plays that someone on its first call.
cat >"$T/racy-ray" <<EOF
#!/bin/sh
if [ ! -e "$T/raced" ]; then
  touch "$T/raced"
  port=\$(printf '%s\n' "\$@" | sed -n 's/^--port=//p')
  setsid python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); time.sleep(60)' "\$port" </dev/null >/dev/null 2>&1 &
  echo \$! >"$T/racer.pid"
  sleep 1
  exit 1
fi
exec "$RAY" "\$@"
EOF
chmod +x "$T/racy-ray"
mkdir -p "$T/f4"
"$T/driver" --ray "$T/racy-ray" --base "$BASE" --rank 0 --ranks 2 --dir "$T/f4" >"$T/f4/out" 2>"$T/f4/err" &
drv=$!
wait_file "$T/f4/info" "$T/f4" 240
grep -qF "were taken while it started; trying the next block" "$T/f4/err" || { cat "$T/f4/err"; fail "no retry warning"; }
[ "$(kv "$T/f4/info" alive)" = 1 ] || fail "head after a port race is not alive"
b4=$(kv "$T/f4/info" block)
[ $((b4 % 2)) = 0 ] && [ "$b4" -gt 0 ] || fail "head after a port race is on block $b4"
touch "$T/f4/stop"
wait "$drv" || fail "driver after a port race failed"
[ "$(kv "$T/f4/result" stop_rc)" = 0 ] || fail "stop after a port race failed"
kill "$(cat "$T/racer.pid")" 2>/dev/null || true
pass "a block taken during start: moved on to block $b4"

# 0c. `ray start` fails once for no fault of the node (on a loaded machine Ray's GCS can miss
#     its own start-up wait): the head is started once more, within the same deadline.
cat >"$T/flaky-ray" <<EOF
#!/bin/sh
if [ ! -e "$T/flaked" ]; then
  touch "$T/flaked"
  echo "fake ray: the GCS did not start in time" >&2
  exit 1
fi
exec "$RAY" "\$@"
EOF
chmod +x "$T/flaky-ray"
mkdir -p "$T/f5"
"$T/driver" --ray "$T/flaky-ray" --base "$BASE" --rank 0 --ranks 1 --dir "$T/f5" >"$T/f5/out" 2>"$T/f5/err" &
drv=$!
wait_file "$T/f5/info" "$T/f5" 240
grep -qF "exited with status 1; last output: fake ray: the GCS did not start in time; starting the Ray head once more" "$T/f5/err" ||
  { cat "$T/f5/err"; fail "no retry warning after a failed start"; }
if grep -F "ERROR" "$T/f5/err"; then fail "a start that worked the second time printed an error"; fi
[ "$(kv "$T/f5/info" alive)" = 1 ] || fail "head started the second time is not alive"
touch "$T/f5/stop"
wait "$drv" || fail "driver after a failed first start failed"
[ "$(kv "$T/f5/result" stop_rc)" = 0 ] || fail "stop after a failed first start failed"
pass "a start that failed once: started the second time"

# 1. Two ranks of one host start their heads at the same time.
start_driver "$T/r0" 0 2
start_driver "$T/r1" 1 2
wait_file "$T/r0/info" "$T/r0" 240
wait_file "$T/r1/info" "$T/r1" 240
cat "$T/r0/info" "$T/r1/info"
for r in 0 1; do
  [ "$(kv "$T/r$r/info" alive)" = 1 ] || fail "head $r is not alive after start"
  [ "$(kv "$T/r$r/info" count)" -ge 2 ] || fail "head $r has too few processes"
  [ "$(kv "$T/r$r/info" watchdog)" -gt 0 ] || fail "head $r has no watchdog"
  pg=$(kv "$T/r$r/info" pgid)
  [ -n "$(pgrep -g "$pg")" ] || fail "no process in group $pg"
  td=$(kv "$T/r$r/info" temp_dir)
  case "$td" in "$BASE"/"$r"-*) ;; *) fail "temp dir $td is not under $BASE/$r-";; esac
  pgrep -g "$pg" -f "raylet.*$td" >/dev/null || fail "head $r has no raylet with its temp dir"
  pgrep -g "$pg" -f "gcs_server.*$td" >/dev/null || fail "head $r has no gcs_server with its temp dir"
done
A0=$(kv "$T/r0/info" address); A1=$(kv "$T/r1/info" address)
P0=$(kv "$T/r0/info" port); P1=$(kv "$T/r1/info" port)
[ "$A0" != "$A1" ] || fail "both heads have the address $A0"
[ "$(kv "$T/r0/info" pgid)" != "$(kv "$T/r1/info" pgid)" ] || fail "both heads share a process group"
# Ranks use disjoint sets of blocks: rank r of 2 only ever uses blocks r, r+2, r+4, ...
[ $(( $(kv "$T/r0/info" block) % 2 )) = 0 ] || fail "rank 0 got an odd block"
[ $(( $(kv "$T/r1/info" block) % 2 )) = 1 ] || fail "rank 1 got an even block"
ss -ltn 2>/dev/null | grep -q ":$P0 " || fail "nothing listens on GCS port $P0"
pass "two heads side by side: $A0 and $A1"

# 2. A Ray driver joins head 0 by its address and runs a task there (not on head 1).
cpus0=$(kv "$T/r0/info" num_cpus)
run_expect 0 "$VENV/bin/python" -c "
import sys, ray
ray.init(address=sys.argv[1], logging_level='ERROR')
@ray.remote
def f(x):
    return x + 1
assert ray.get(f.remote(41)) == 42
# The head's workers keep the priority the head was started with (Ray would renice them to
# 15, where they starve beside any busy process): RAY_worker_niceness=0 in its environment.
import os
@ray.remote
def nice():
    return os.getpriority(os.PRIO_PROCESS, 0)
assert ray.get(nice.remote()) == int(sys.argv[4]), (ray.get(nice.remote()), sys.argv[4])
ctx = ray.get_runtime_context()
assert ctx.gcs_address.endswith(':' + sys.argv[1].rsplit(':', 1)[1]), ctx.gcs_address
cpus = ray.cluster_resources().get('CPU')
assert cpus == float(sys.argv[2]), cpus
import ray._private.worker as w
assert w._global_node.get_session_dir_path().startswith(sys.argv[3] + '/'), w._global_node.get_session_dir_path()
print('task ok', ctx.gcs_address, cpus)
ray.shutdown()
" "$A0" "$cpus0" "$(kv "$T/r0/info" temp_dir)" "$(ps -o ni= -p "$(pgrep -g "$(kv "$T/r0/info" pgid)" -f raylet | head -1)" | tr -d ' ')"
expect_out "task ok"
pass "a Ray driver ran a task on head 0 ($(cat "$T/out"))"

# 3. A new start of rank 0 while head 0 holds its block (a leftover of a crashed run looks the
#    same) never joins it: it takes the next block of rank 0.
start_driver "$T/r2" 0 2
wait_file "$T/r2/info" "$T/r2" 240
P2=$(kv "$T/r2/info" port)
[ "$P2" != "$P0" ] && [ "$P2" != "$P1" ] || fail "third head reused port $P2"
[ $(( $(kv "$T/r2/info" block) % 2 )) = 0 ] || fail "third head (rank 0) left rank 0's blocks"
# Not necessarily a higher block: a lower one that another Ray user of this host held when head 0
# started may be free again (a fresh-clone run beside another checkout's dj tests saw that).
[ "$(kv "$T/r2/info" block)" != "$(kv "$T/r0/info" block)" ] || fail "third head did not skip the busy block"
touch "$T/r2/stop"
pass "a busy block is skipped: rank 0 moved from port $P0 to $P2"

# 4. Head 1 loses its raylet: alive says so, stop still cleans everything up.
pg1=$(kv "$T/r1/info" pgid)
pkill -KILL -g "$pg1" -x raylet || fail "cannot kill head 1's raylet"
touch "$T/r1/stop" "$T/r0/stop"
for r in 0 1 2; do
  pid=$(cat "$T/r$r/pid")
  rc=0; wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { cat "$T/r$r/err"; fail "driver $r exited with $rc"; }
  cat "$T/r$r/result"
  [ "$(kv "$T/r$r/result" stop_rc)" = 0 ] || fail "stop of head $r failed"
  [ "$(kv "$T/r$r/result" stop2_rc)" = 0 ] || fail "second stop of head $r is not a no-op"
  [ "$(kv "$T/r$r/result" alive_after_stop)" = 0 ] || fail "head $r alive after stop"
done
[ "$(kv "$T/r0/result" alive_before_stop)" = 1 ] || fail "head 0 was not alive before stop"
[ "$(kv "$T/r1/result" alive_before_stop)" = 0 ] || fail "head 1 without raylet was reported alive"
pass "stop: head 0 in $(kv "$T/r0/result" stop_secs) s, head 1 (raylet killed) in $(kv "$T/r1/result" stop_secs) s"

# 5. Nothing of any head is left: no live process in their groups, none with their token or
#    temp dir, and the temp dirs are gone. Zombies wait for init to reap them: give it time.
keys=()
for r in 0 1 2; do
  keys+=("ESHARD_RAY_HEAD=$(kv "$T/r$r/info" token)" "$(kv "$T/r$r/info" temp_dir)")
  [ ! -e "$(kv "$T/r$r/info" temp_dir)" ] || fail "temp dir of head $r is left"
done
left=$(leftovers "${keys[@]}")
[ -z "$left" ] || fail "processes left: $left"

for r in 0 1 2; do
  pg=$(kv "$T/r$r/info" pgid)
  i=0
  while [ -n "$(pgrep -g "$pg")" ]; do
    i=$((i + 1))
    if [ "$i" -gt 300 ]; then
      ps -o pid,stat,args -g "$pg"
      if ps -o stat= -g "$pg" | grep -qv '^Z'; then fail "group $pg of head $r is not empty"; fi
      echo "note: only zombies left in group $pg (init reaps them late)"; break
    fi
    sleep 0.1
  done
done
pass "no process, group member or temp dir of any head is left"

# 6. A rank that dies without stopping its head: the watchdog takes the head down.
start_driver "$T/r3" 0 1 --crash
wait_file "$T/r3/info" "$T/r3" 240
wait "$(cat "$T/r3/pid")" || fail "crash driver failed"
tok3=$(kv "$T/r3/info" token)
i=0
while [ -n "$(leftovers "ESHARD_RAY_HEAD=$tok3")" ]; do
  i=$((i + 1)); [ "$i" -lt 150 ] || fail "head of a dead rank is still running: $(leftovers "ESHARD_RAY_HEAD=$tok3")"
  sleep 0.1
done
pass "the head of a rank that died went down with it"
echo "PASS test_ray_head"
