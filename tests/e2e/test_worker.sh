#!/bin/bash
# The worker through the real binary, with real child processes and real files
# (docs/design.md#the-worker-loop, docs/design.md#reference-tests 10 and 11, and the leases,
# supervision and events of docs/design.md):
# a whole job, failures and the retry limit, retry + ordered merge, corrupt output, folder
# materialization, SIGTERM (preemption), leases against a live slow shard and a SIGKILLed
# worker, the attempt timeout, the event log, and start-up errors.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(30):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "y" * (i % 5)}) + "\n")
PY

# prep NAME SHARDS CMD [OPTIONS...]: a job $T/NAME processed by CMD.
prep() {
  local name=$1 n=$2 cmd=$3; shift 3
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/$name" \
    --num-shards "$n" --process-cmd "$cmd" "$@"
}
sid() { printf 'part-%05d-of-%05d' "$1" "$2"; }
# holds PYTHON-EXPR MESSAGE: the expression (with the variables given as key=value after it) holds.
holds() {
  local expr=$1 msg=$2; shift 2
  python3 - "$expr" "$@" <<'PY' || fail "$msg"
import sys
env = {}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    try:
        env[k] = float(v)
    except ValueError:
        env[k] = v
sys.exit(0 if eval(sys.argv[1], {}, env) else 1)
PY
}
# exited PID: the process PID (a child of this shell) has ended.
exited() { ! kill -0 "$1" 2>/dev/null || [[ $(ps -o stat= -p "$1") == Z* ]]; }
# heartbeat_at_least LOCK N: the lock's heartbeat counter has reached N.
heartbeat_at_least() { [ "$(json_get "$1" '.get("heartbeat", 0)' 2>/dev/null)" -ge "$2" ] 2>/dev/null; }
# jq-like reads: jget FILE PY-SUBSCRIPT
jget() { json_get "$@"; }
# The only attempt folder of a shard matching NNNN (absolute path).
attempt_dir() { local d; d=$(ls -d "$1/attempts/$2/$3"-* 2>/dev/null | head -1); [ -n "$d" ] || fail "no attempt $3 of $2"; echo "$d"; }
count_dirs() { if [ -d "$1" ]; then find "$1" -mindepth 1 -maxdepth 1 | wc -l; else echo 0; fi; }
gone() { ! kill -0 "$1" 2>/dev/null; }
group_gone() { ! kill -0 -- "-$1" 2>/dev/null; }
# failures_of JOB SHARD: attempts whose status is failed or stale
# (docs/job-folder.md#claiming-a-shard, step 3).
failures_of() {
  python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
n = 0
for a in glob.glob(os.path.join(sys.argv[1], "attempts", sys.argv[2], "*", "attempt.json")):
    n += json.load(open(a)).get("status") in ("failed", "stale")
print(n)
PY
}

# A processor that sleeps for $T/sleep_secs seconds (0 when missing), with a grandchild, and
# records both pids in the attempt folder; then copies its input.
cat >"$T/sleepy.sh" <<EOF
#!/bin/sh
s=\$(cat "$T/sleep_secs" 2>/dev/null || echo 0)
echo \$\$ > "\$3/child.pid.tmp" && mv "\$3/child.pid.tmp" "\$3/child.pid"
sleep "\$s" &
echo \$! > "\$3/grandchild.pid.tmp" && mv "\$3/grandchild.pid.tmp" "\$3/grandchild.pid"
wait
cp "\$1" "\$2"
EOF
SLEEPY="sh $T/sleepy.sh {input} {output} {attempt_dir}"

# ==== 1. One worker completes a 6-shard job; merge gives the shards in order.
J=$T/six
prep six 6 'cp {input} {output}'
run_expect 0 "$BIN" worker --job-dir "$J"
expect_out "All 6 shards completed"
expect_out "Worker $(hostname):"
for k in 0 1 2 3 4 5; do
  s=$(sid $k 6)
  expect_out "Claimed $s (attempt 1)"
  expect_out "Finished $s: done"
  [ -f "$J/state/done/$s.json" ] || fail "no done record for $s"
  [ "$(jget "$J/state/done/$s.json" '["status"]')" = done ] || fail "done status $s"
  [ "$(count_dirs "$J/attempts/$s")" = 1 ] || fail "attempts of $s"
  A=$(attempt_dir "$J" "$s" 0001)
  [ "$(jget "$A/attempt.json" '["status"]')" = done ] || fail "attempt status $s"
  cmp -s "$A/processed.jsonl" "$J/shards/$s.jsonl" || fail "processed.jsonl of $s differs from its shard"
done
[ "$(fence_counts "$J")" = "6 0 0" ] || fail "after a complete job every lock must be a done fence: $(fence_counts "$J")"
run_expect 0 "$BIN" status --job-dir "$J" --json
[ "$(jget "$T/out" '["complete"]')" = True ] || fail "status not complete"
[ "$(jget "$T/out" '["counts"]["done"]')" = 6 ] || fail "status done count"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/six.jsonl"
expect_out "Merged 6 shards and 30 rows into $T/six.jsonl"
cat "$J"/shards/part-0000{0,1,2,3,4,5}-of-00006.jsonl >"$T/six.expected"
cmp "$T/six.jsonl" "$T/six.expected" || fail "merged output is not the concatenated shards"
[ "$(jget "$J/merge.json" '["rows"]')" = 30 ] || fail "merge.json rows"
[ "$(jget "$J/merge.json" '["sha256"]')" = "$(sha256sum <"$T/six.jsonl" | cut -d' ' -f1)" ] || fail "merge.json sha"
[ "$(jget "$J/merge.json" '["sha256"]')" = "$(jget "$J/manifest.json" '["normalized_sha256"]')" ] || fail "merge sha vs manifest"
pass "one worker completes a 6-shard job; ordered merge"

# ==== 2. --max-shards 1 with a processor that always fails: exit 2 (reference test 10).
J=$T/maxone
prep maxone 2 'sh -c "exit 3" {input} {output}'
run_expect 2 "$BIN" worker --job-dir "$J" --max-shards 1
# The Finished line says why, and what comes next (--max-retries 3: a retry).
expect_out "Finished $(sid 0 2): failed (attempt 1, "
expect_out "): Processor returned exit code 3; will be retried (retry 1 of 3)"
expect_out "Reached --max-shards=1"
A=$(attempt_dir "$J" "$(sid 0 2)" 0001)
[ "$(jget "$A/attempt.json" '["status"]')" = failed ] || fail "max-shards attempt status"
[ "$(jget "$A/attempt.json" '["error"]')" = "Processor returned exit code 3" ] || fail "max-shards attempt error"
[ "$(jget "$A/attempt.json" '["return_code"]')" = 3 ] || fail "max-shards return code"
[ ! -e "$J/state/failed/$(sid 0 2).json" ] || fail "failed record after one of four attempts"
[ "$(count_dirs "$J/state/locks")" = 0 ] || fail "lock left after a failed attempt"
# A successful --max-shards run exits 0.
J=$T/maxok
prep maxok 3 'cp {input} {output}'
run_expect 0 "$BIN" worker --job-dir "$J" --max-shards 2
expect_out "Reached --max-shards=2"
run_expect 1 "$BIN" status --job-dir "$J"
expect_out "pending=1 running=0 stale=0 done=2 failed=0"
pass "--max-shards 1 with a failing processor exits 2"

# ==== 3. A shard that always fails ends failed after max_retries+1 attempts.
J=$T/failall
prep failall 2 'sh -c "exit 3" {input} {output}' --max-retries 1
run_expect 2 "$BIN" worker --job-dir "$J"
expect_err "Job finished with failures: done=0 failed=2"
for k in 0 1; do
  s=$(sid $k 2)
  [ "$(count_dirs "$J/attempts/$s")" = 2 ] || fail "$s: expected 2 attempts (max_retries 1)"
  for n in 0001 0002; do
    [ "$(jget "$(attempt_dir "$J" "$s" $n)/attempt.json" '["status"]')" = failed ] || fail "$s/$n not failed"
  done
  F=$J/state/failed/$s.json
  [ "$(jget "$F" '["failures"]')" = 2 ] || fail "$s failures"
  [ "$(jget "$F" '["last_attempt"]')" = 2 ] || fail "$s last_attempt"
  [ "$(jget "$F" '["last_error"]')" = "Processor returned exit code 3" ] || fail "$s last_error"
  A2=$(attempt_dir "$J" "$s" 0002)
  [ "$(jget "$F" '["last_log"]')" = "${A2#$J/}/process.log" ] || fail "$s last_log"
  [ "$(jget "$F" '["status"]')" = failed ] || fail "$s failed status"
done
run_expect 2 "$BIN" status --job-dir "$J"
expect_out "done=0 failed=2"
# Another worker on the terminal job exits 2 at once without claiming.
run_expect 2 "$BIN" worker --job-dir "$J"
grep -q Claimed "$T/out" && fail "claimed a failed shard"
pass "a failing shard ends failed after max_retries+1 attempts"

# ==== 4. retry --shard-id, a fixed processor, ordered merge (reference test 11).
# The processor is fixed in the manifest; its behaviour depends on a flag file.
cat >"$T/flaky.sh" <<EOF
#!/bin/sh
if [ "\$3" = "$(sid 1 3)" ] && [ ! -e "$T/fixed" ]; then echo "shard \$3 is broken" >&2; exit 3; fi
cp "\$1" "\$2"
EOF
J=$T/flaky
S1=$(sid 1 3)
prep flaky 3 "sh $T/flaky.sh {input} {output} {shard_id}" --max-retries 2
run_expect 2 "$BIN" worker --job-dir "$J"
expect_err "Job finished with failures: done=2 failed=1"
[ "$(count_dirs "$J/attempts/$S1")" = 3 ] || fail "flaky: expected 3 attempts"
[ "$(jget "$J/state/failed/$S1.json" '["failures"]')" = 3 ] || fail "flaky failures"
grep -q "shard $S1 is broken" "$(attempt_dir "$J" "$S1" 0003)/process.log" || fail "process.log lacks the child's stderr"
run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/flaky.jsonl"
expect_err "Cannot merge an incomplete job"
[ ! -e "$T/flaky.jsonl" ] || fail "merge of an incomplete job wrote its output"
touch "$T/fixed"
run_expect 0 "$BIN" retry --job-dir "$J" --shard-id "$S1"
expect_out "Requeued $S1"
[ ! -e "$J/state/failed/$S1.json" ] || fail "retry left the failed record"
[ ! -e "$J/attempts/$S1" ] || fail "retry left the attempts"
ls "$J/state/history/failed/$S1".*.json >/dev/null 2>&1 || fail "failed record not in history"
[ "$(find "$J/state/history/attempts" -mindepth 2 -maxdepth 2 -type d | wc -l)" = 3 ] || fail "attempts not in history"
run_expect 0 "$BIN" worker --job-dir "$J"
expect_out "Claimed $S1 (attempt 1)"
expect_out "All 3 shards completed"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/flaky.jsonl"
cat "$J"/shards/part-0000{0,1,2}-of-00003.jsonl >"$T/flaky.expected"
cmp "$T/flaky.jsonl" "$T/flaky.expected" || fail "flaky: merged output is not the shards in order"
[ "$(jget "$J/merge.json" '["rows"]')" = "$(jget "$J/manifest.json" '["total_rows"]')" ] || fail "flaky merge rows"
[ "$(jget "$J/merge.json" '["sha256"]')" = "$(sha256sum <"$T/flaky.jsonl" | cut -d' ' -f1)" ] || fail "flaky merge sha"
pass "retry --shard-id, fixed processor, ordered merge"

# ==== 5. Corrupt child output: the attempt fails with path:line; the shard stays claimable.
cat >"$T/corrupt.sh" <<EOF
#!/bin/sh
if [ -e "$T/fixed-corrupt" ]; then cp "\$1" "\$2"; else printf '{"a": 1}\nnot json\n{"b": 2}\n' > "\$2"; fi
EOF
J=$T/corrupt
S=$(sid 0 1)
prep corrupt 1 "sh $T/corrupt.sh {input} {output}"
run_expect 2 "$BIN" worker --job-dir "$J" --max-shards 1
A=$(attempt_dir "$J" "$S" 0001)
[ "$(jget "$A/attempt.json" '["status"]')" = failed ] || fail "corrupt: attempt not failed"
ERR=$(jget "$A/attempt.json" '["error"]')
case $ERR in "Invalid JSON at $A/ray-output.jsonl:2: "*) ;; *) fail "corrupt: error lacks the path:line: $ERR" ;; esac
[ ! -e "$A/processed.jsonl" ] || fail "corrupt: processed.jsonl published"
compgen -G "$A/.processed.jsonl.*.tmp" >/dev/null && fail "corrupt: temporary left behind"
[ ! -e "$J/state/done/$S.json" ] && [ ! -e "$J/state/failed/$S.json" ] || fail "corrupt: marker written"
[ "$(count_dirs "$J/state/locks")" = 0 ] || fail "corrupt: lock left"
run_expect 1 "$BIN" status --job-dir "$J" --json
[ "$(jget "$T/out" '["shards"][0]["status"]')" = pending ] || fail "corrupt: shard not pending"
touch "$T/fixed-corrupt"
run_expect 0 "$BIN" worker --job-dir "$J"
expect_out "Claimed $S (attempt 2)"
[ "$(jget "$J/state/done/$S.json" '["attempt_number"]')" = 2 ] || fail "corrupt: done attempt"
pass "corrupt output fails the attempt with path:line, the shard stays claimable"

# ==== 6. Materialization of a folder: part files (sorted by relative path, nested ones
# included), _SUCCESS and .crc files skipped, a missing final newline added.
cat >"$T/folder.sh" <<'EOF'
#!/bin/sh
in=$1 out=$2
mkdir -p "$out/nested"
sed -n '1,2p' "$in" > "$out/part-1.jsonl"
sed -n '3,4p' "$in" > "$out/part-0.jsonl"
sed -n '5,$p' "$in" | head -c -1 > "$out/nested/part-2.jsonl"
echo "not json" > "$out/_SUCCESS"
printf 'crc\000\001' > "$out/.part-0.jsonl.crc"
printf 'crc' > "$out/nested/.part-2.jsonl.crc"
EOF
J=$T/folder
S=$(sid 0 3)
prep folder 3 "sh $T/folder.sh {input} {output}"
N=$(jget "$J/manifest.json" '["shards"][0]["rows"]')
holds "n >= 6" "folder: the first shard should hold at least 6 rows" n="$N"
run_expect 0 "$BIN" worker --job-dir "$J" --max-shards 1
A=$(attempt_dir "$J" "$S" 0001)
{ sed -n '5,$p' "$J/shards/$S.jsonl"; sed -n '3,4p' "$J/shards/$S.jsonl"; sed -n '1,2p' "$J/shards/$S.jsonl"; } >"$T/folder.expected"
cmp "$A/processed.jsonl" "$T/folder.expected" || fail "folder: processed.jsonl is not the sorted part files"
D=$J/state/done/$S.json
[ "$(jget "$D" '["rows"]')" = "$N" ] || fail "folder: done rows"
[ "$(jget "$D" '["sha256"]')" = "$(sha256sum <"$T/folder.expected" | cut -d' ' -f1)" ] || fail "folder: done sha"
R=${A#$J/}/ray-output.jsonl
python3 - "$D" "$R" "$A/ray-output.jsonl" "$N" <<'PY' || fail "folder: ray_output_files"
import hashlib, json, sys
d = json.load(open(sys.argv[1]))
r, root = sys.argv[2], sys.argv[3]
want = [("nested/part-2.jsonl", int(sys.argv[4]) - 4), ("part-0.jsonl", 2), ("part-1.jsonl", 2)]
got = d["ray_output_files"]
assert [(f["path"], f["rows"]) for f in got] == [(r + "/" + p, n) for p, n in want], got
for f, (p, _) in zip(got, want):
    raw = open(root + "/" + p, "rb").read()
    assert f["size_bytes"] == len(raw) and f["sha256"] == hashlib.sha256(raw).hexdigest(), f
PY
pass "materialization of a folder with part files, _SUCCESS and .crc files"

# ==== 7. SIGTERM (preemption): the child's tree stops, the lock goes at once, the attempt is
# "preempted" and not counted; exit 143; a new worker resumes at once.
J=$T/sigterm
S=$(sid 0 2)
echo 30 >"$T/sleep_secs"
prep sigterm 2 "$SLEEPY" --heartbeat-secs 0.5 --lease-secs 60 --poll-interval-secs 1
"$BIN" worker --job-dir "$J" >"$T/w7.out" 2>"$T/w7.err" &
W=$!
A=$(for i in $(seq 100); do d=$(ls -d "$J/attempts/$S"/0001-* 2>/dev/null) && [ -s "$d/grandchild.pid" ] && { echo "$d"; break; }; sleep 0.05; done)
[ -n "$A" ] || fail "sigterm: the child did not start"
C=$(cat "$A/child.pid") G=$(cat "$A/grandchild.pid")
[ "$(ps -o pgid= -p "$C" | tr -d ' ')" = "$C" ] || fail "sigterm: the child does not lead its own process group"
[ "$(ps -o pgid= -p "$G" | tr -d ' ')" = "$C" ] || fail "sigterm: the grandchild is not in the child's group"
[ -e "$J/state/locks/$S.lock" ] || fail "sigterm: no lock while running"
t0=$(now)
kill -TERM "$W"
rc=0; wait "$W" || rc=$?
t1=$(now)
[ "$rc" = 143 ] || { cat "$T/w7.out" "$T/w7.err"; fail "sigterm: exit $rc, expected 143"; }
holds "t1 - t0 < 2.0" "sigterm: the worker took more than 2 s to stop" t0="$t0" t1="$t1"
[ ! -e "$J/state/locks/$S.lock" ] || fail "sigterm: lock not released"
[ "$(jget "$A/attempt.json" '["status"]')" = preempted ] || fail "sigterm: attempt not preempted"
gone "$C" && gone "$G" && group_gone "$C" || fail "sigterm: the child's process group survived"
grep -q "Finished $S: preempted (attempt 1, [0-9.]* s): stopped by SIGTERM; not counted as a failure" "$T/w7.out" ||
  { cat "$T/w7.out"; fail "sigterm: no Finished line with its reason"; }
grep -q "stopped by SIGTERM; its claims were released" "$T/w7.err" || { cat "$T/w7.err"; fail "sigterm: no stop message"; }
run_expect 1 "$BIN" status --job-dir "$J" --json
[ "$(jget "$T/out" '["shards"][0]["status"]')" = pending ] || fail "sigterm: shard not pending"
[ "$(jget "$T/out" '["counts"]["pending"]')" = 2 ] || fail "sigterm: pending count"
[ "$(failures_of "$J" "$S")" = 0 ] || fail "sigterm: a failure was counted"
grep -h '"event": "preempted"' "$J"/state/events/*.jsonl | grep -q "\"shard\": \"$S\"" || fail "sigterm: no preempted event"
echo 0 >"$T/sleep_secs"
t0=$(now)
run_expect 0 "$BIN" worker --job-dir "$J"
t1=$(now)
expect_out "Claimed $S (attempt 2)"
# At once: not after the stopped worker's lease (60 s); half of it leaves room for a loaded machine.
holds "t1 - t0 < 30.0" "sigterm: the next worker did not resume at once (it took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s)" t0="$t0" t1="$t1"
[ "$(jget "$J/state/done/$S.json" '["attempt_number"]')" = 2 ] || fail "sigterm: done by attempt 2"
pass "SIGTERM preempts: lock released, attempt preempted, no failure counted, exit 143, resumed"

# ==== 8a. Lease: a live shard running 3x the lease is never taken over.
J=$T/lease
S=$(sid 0 1)
echo 6 >"$T/sleep_secs"
prep lease 1 "$SLEEPY" --heartbeat-secs 0.5 --lease-secs 2 --poll-interval-secs 1
"$BIN" worker --job-dir "$J" >"$T/w8a.out" 2>"$T/w8a.err" &
WA=$!
wait_for 10 compgen -G "$J/attempts/$S/0001-*/child.pid"
"$BIN" worker --job-dir "$J" >"$T/w8b.out" 2>"$T/w8b.err" &
WB=$!
INO0=$(stat -c %i "$J/state/locks/$S.lock")
# A third worker, idle while the shard runs, stops at once on SIGTERM without touching it: its
# poll interval is a minute, so stopping within the deadline below means that it did not wait
# for its next poll (how many milliseconds it takes is a timing figure, not a pass/fail one).
"$BIN" worker --job-dir "$J" --poll-interval-secs 60 >"$T/w8c.out" 2>"$T/w8c.err" &
WC=$!
wait_for 20 grep -q 'No shard claim available' "$T/w8c.out"
kill -TERM "$WC"
wait_for 20 exited "$WC"
rc=0; wait "$WC" || rc=$?
[ "$rc" = 143 ] || fail "lease: idle worker exit $rc on SIGTERM, expected 143"
grep -q Claimed "$T/w8c.out" && fail "lease: the idle worker claimed the live shard"
# The owner keeps its lease: the heartbeat counts up past 5 (2.5 s at 0.5 s) on the same inode.
wait_for 20 heartbeat_at_least "$J/state/locks/$S.lock" 5
INO1=$(stat -c %i "$J/state/locks/$S.lock")
[ "$INO0" = "$INO1" ] || fail "lease: the lock was replaced while its owner lived"
rc=0; wait "$WA" || rc=$?; [ "$rc" = 0 ] || { cat "$T/w8a.out" "$T/w8a.err"; fail "lease: worker A exit $rc"; }
rc=0; wait "$WB" || rc=$?; [ "$rc" = 0 ] || { cat "$T/w8b.out" "$T/w8b.err"; fail "lease: worker B exit $rc"; }
[ "$(count_dirs "$J/attempts/$S")" = 1 ] || fail "lease: processed more than once"
[ "$(count_dirs "$J/state/stale_locks")" = 0 ] || fail "lease: a live lock was taken over"
grep -q Claimed "$T/w8b.out" && fail "lease: the second worker claimed the live shard"
grep -q "No shard claim available; pending=0 running=1 stale=0" "$T/w8b.out" || fail "lease: B never saw it running"
grep -h stale_takeover "$J"/state/events/*.jsonl && fail "lease: stale_takeover event"
pass "lease: a live shard running 3x the lease is processed once"

# ==== 8b. A SIGKILLed worker: its child tree dies within ~2 s; another worker takes the shard
# over after about one lease and completes the job.
J=$T/killed
S=$(sid 0 2)
echo 30 >"$T/sleep_secs"
prep killed 2 "$SLEEPY" --heartbeat-secs 0.5 --lease-secs 2 --poll-interval-secs 1
"$BIN" worker --job-dir "$J" >"$T/w9.out" 2>"$T/w9.err" &
W=$!
A=$(for i in $(seq 100); do d=$(ls -d "$J/attempts/$S"/0001-* 2>/dev/null) && [ -s "$d/grandchild.pid" ] && { echo "$d"; break; }; sleep 0.05; done)
[ -n "$A" ] || fail "killed: the child did not start"
C=$(cat "$A/child.pid") G=$(cat "$A/grandchild.pid")
TOK_A=$(jget "$A/attempt.json" '["token"]')
sleep 1
kill -KILL "$W"
tk=$(now)
wait "$W" 2>/dev/null || true
for i in $(seq 60); do gone "$C" && gone "$G" && group_gone "$C" && break; sleep 0.05; done
tg=$(now)
gone "$C" && gone "$G" && group_gone "$C" || fail "killed: the child's tree outlived its worker"
holds "tg - tk < 2.5" "killed: the child's tree took more than 2 s to die" tg="$tg" tk="$tk"
[ -e "$J/state/locks/$S.lock" ] || fail "killed: the dead worker's lock is gone"
echo 0 >"$T/sleep_secs"
# --no-backup: this is the takeover path (an idle worker would otherwise back the dead one's
# shard up first; test_backup covers that). The lease runs on the taker's clock from when it
# first reads the lock, so the takeover is timed from this worker's start (ts), not from the kill:
# the wait for the tree above and this process's start-up come before it under load.
ts=$(now)
run_expect 0 "$BIN" worker --job-dir "$J" --no-backup
expect_out "Claimed $S (attempt 2)"
expect_out "All 2 shards completed"
TT=$(grep -h '"event": "stale_takeover"' "$J"/state/events/*.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["time"])')
echo "takeover $(python3 -c "print(round($TT - $tk, 3))") s after the SIGKILL, $(python3 -c "print(round($TT - $ts, 3))") s after the taker started (lease 2 s, poll 1 s)"
holds "2.0 <= tt - tk and 2.0 <= tt - ts <= 2.0 + 3 * 1.0 + 0.5" "killed: takeover not between one lease and lease + 3 polls of the taker's start" tt="$TT" tk="$tk" ts="$ts"
[ "$(jget "$A/attempt.json" '["status"]')" = stale ] || fail "killed: old attempt not stale"
[ "$(count_dirs "$J/state/stale_locks")" = 1 ] || fail "killed: stale_locks"
[ "$(jget "$J/state/done/$S.json" '["attempt_number"]')" = 2 ] || fail "killed: done by attempt 2"
[ "$(failures_of "$J" "$S")" = 1 ] || fail "killed: the stale attempt should count once"
grep -h '"event": "stale_takeover"' "$J"/state/events/*.jsonl | grep -q "\"token\": \"$TOK_A\"" || fail "killed: takeover event lacks the old token"
pass "SIGKILLed worker: child tree gone, shard taken over after one lease, job completed"

# ==== 9. --attempt-timeout-secs kills a long child and counts a failure.
J=$T/timeout
S=$(sid 0 1)
echo 30 >"$T/sleep_secs"
prep timeout 1 "$SLEEPY"
t0=$(now)
run_expect 2 "$BIN" worker --job-dir "$J" --attempt-timeout-secs 1 --max-shards 1
t1=$(now)
holds "1.0 <= t1 - t0 < 6.0" "timeout: the worker ran $(python3 -c "print($t1 - $t0)") s" t0="$t0" t1="$t1"
A=$(attempt_dir "$J" "$S" 0001)
[ "$(jget "$A/attempt.json" '["status"]')" = failed ] || fail "timeout: attempt not failed"
jget "$A/attempt.json" '["error"]' | grep -q "timed out after 1 s" || fail "timeout: error message"
C=$(cat "$A/child.pid") G=$(cat "$A/grandchild.pid")
gone "$C" && gone "$G" && group_gone "$C" || fail "timeout: the child's tree survived"
[ "$(failures_of "$J" "$S")" = 1 ] || fail "timeout: no failure counted"
[ "$(count_dirs "$J/state/locks")" = 0 ] || fail "timeout: lock left"
grep -q "stopping the processor: timed out" "$A/process.log" || fail "timeout: no note in process.log"
echo 0 >"$T/sleep_secs"
pass "--attempt-timeout-secs kills a long child and counts a failure"

# ==== 10. The event log: claim/start/done/stale_takeover/preempted lines, each with host,
# pid, shard, attempt, token and time.
python3 - "$T" "$(hostname)" <<'PY' || fail "events"
import glob, json, os, re, sys
root, host = sys.argv[1], sys.argv[2]
seen = {}
for f in glob.glob(os.path.join(root, "*", "state", "events", "*.jsonl")):
    name = os.path.basename(f)
    assert re.fullmatch(re.escape(host) + r"\.\d+\.[0-9a-f]{8}\.jsonl", name), name
    for line in open(f):
        e = json.loads(line)
        seen[e["event"]] = seen.get(e["event"], 0) + 1
        assert int(name.split(".")[-3]) == e["pid"], (name, e)
        for k in ("host", "pid", "shard", "attempt", "token", "time"):
            assert k in e, ("missing", k, e)
        assert e["host"] == host and isinstance(e["pid"], int) and e["attempt"] >= 1, e
        assert re.fullmatch(r"[0-9a-f]{32}", e["token"]) and isinstance(e["time"], float), e
for ev in ("claim", "start", "done", "failed", "stale_takeover", "preempted"):
    assert seen.get(ev), ("no %s event" % ev, seen)
print("events:", seen)
PY
# The killed job's two workers: the second one's file tells the takeover story in order.
python3 - "$T/killed" <<'PY' || fail "events of the takeover"
import glob, json, os, sys
job = sys.argv[1]
evs = sorted((json.loads(l) for f in glob.glob(os.path.join(job, "state/events/*.jsonl")) for l in open(f)),
             key=lambda e: e["time"])
s0 = [(e["event"], e["attempt"]) for e in evs if e["shard"] == "part-00000-of-00002"]
assert s0 == [("claim", 1), ("start", 1), ("stale_takeover", 1), ("claim", 2), ("start", 2), ("done", 2)], s0
PY
pass "event log"

# ==== 11. Start-up errors.
J=$T/bad
prep bad 2 'cp {input} {output}'
cp "$J/recipe.yaml" "$T/recipe.keep"
echo "# tampered" >>"$J/recipe.yaml"
run_expect 2 "$BIN" worker --job-dir "$J"
expect_err "Recipe snapshot hash does not match manifest"
cp "$T/recipe.keep" "$J/recipe.yaml"
sed -i 's/"schema_version": 2/"schema_version": 3/' "$J/manifest.json"
run_expect 2 "$BIN" worker --job-dir "$J"
expect_err "schema_version"
sed -i 's/"schema_version": 3/"schema_version": 2/' "$J/manifest.json"
run_expect 2 "$BIN" worker --job-dir "$T/no-such-job"
expect_err "ERROR: Job manifest not found: $T/no-such-job/manifest.json"
run_expect 2 "$BIN" worker
expect_err "--job-dir is required"
[ "$(count_dirs "$J/attempts")" = 0 ] || fail "a refused worker touched the job"
run_expect 0 "$BIN" worker --job-dir "$J"
pass "start-up errors: tampered recipe, schema_version 3, missing job folder"

# The claim writes attempt.json once before the child starts, with the command already in it (a
# worker stopped right after that write leaves it so), and that command is the argv the child
# gets (the child writes its own argv beside it).
printf '#!/bin/sh\nprintf "%%s\\n" "$0" "$@" >"$(dirname "$2")/argv.txt"\ncp "$1" "$2"\n' >"$T/argv.sh"
chmod +x "$T/argv.sh"
prep once 2 "$T/argv.sh {input} {output}"
ESHARD_TEST_CRASH_AT=claim-after-attempt-json run_expect 99 "$BIN" worker --job-dir "$T/once" --max-shards 1
a=$(ls -d "$T/once/attempts/$(sid 0 2)"/0001-*)
python3 - "$T/once" "$a" "$T/argv.sh" "$(sid 0 2)" <<'PY' || fail "the claim's attempt.json has not the command"
import json, os, sys
job, adir, prog, shard = sys.argv[1:]
a = json.load(open(os.path.join(adir, "attempt.json")))
want = [prog, os.path.join(job, "shards", shard + ".jsonl"), os.path.join(adir, "ray-output.jsonl")]
assert a["status"] == "running", a
assert a["command"] == want, (a["command"], want)
assert a["ray_export_path"] == os.path.relpath(os.path.join(adir, "ray-output.jsonl"), job), a
PY
run_expect 0 "$BIN" worker --job-dir "$T/once" --max-shards 1
b=$(ls -d "$T/once/attempts/$(sid 1 2)"/0001-*)
python3 - "$b" <<'PY' || fail "the command in attempt.json is not the argv the child got"
import json, os, sys
a = json.load(open(os.path.join(sys.argv[1], "attempt.json")))
argv = open(os.path.join(sys.argv[1], "argv.txt")).read().split("\n")[:-1]
assert a["command"] == argv, (a["command"], argv)
assert a["status"] == "done", a
PY
pass "the claim writes the command into attempt.json: one write before the child starts, the argv the child gets"
