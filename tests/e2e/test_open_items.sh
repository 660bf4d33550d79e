#!/bin/bash
# The six open items of issue 9, each proven through the real binary (a test build: its hooks
# widen the windows that a race needs):
#   (a) the lease is refreshed while a result is materialized: a copy longer than the lease is
#       not taken over by a second worker;
#   (b) a processor that cannot start is not charged to the shard: the attempt is not_started,
#       the lock released, the worker stops with exit 2 and a clear message, and a node that
#       cannot start it never uses up a shard's retries;
#   (c) retry is not blocked by a crash between the failed record and its fence: a running lock
#       whose token is the failed record's is that record's fence-to-be;
#   (d) SIGTERM to rank 0 during prepare and during merge under mpirun run: every rank exits
#       143 at once, no job folder, stage folder, output or temporary is left half-made, and
#       the same command then passes;
#   (e) failures are counted while the lock is held: a claimer that counted before a takeover
#       marked the last allowed attempt stale cannot run one attempt over the limit;
#   (f) retry never touches a shard whose lock is running and live: a retry that checked its
#       targets before another retry requeued the shard and a worker claimed it leaves that
#       claim, its lock and its attempt folder alone;
#   and (g), found by test_chaos: a stale takeover removes the temporaries of the dead owner.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
need_test_hooks
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        f.write(json.dumps({"id": i, "text": "open item row %d " % i + "q" * (i % 11)}) + "\n")
PY
# The processor, steered by files beside the job folder (<job>.<what>): .hang sleeps for a
# minute, .wait says .started and waits for .release, .fail exits 3, .parts writes the export as a folder of three part files, else a copy.
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
if [ -e "$3.hang" ]; then sleep 60; fi
if [ -e "$3.wait" ]; then touch "$3.started"; while [ ! -e "$3.release" ]; do sleep 0.1; done; fi
if [ -e "$3.fail" ]; then echo "failing on purpose" >&2; exit 3; fi
if [ -e "$3.parts" ]; then mkdir -p "$2" && split -n l/3 -d "$1" "$2/part-" && exit 0; fi
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
PROC="$T/proc.sh {input} {output} {job_dir}"
# prep JOB SHARDS [OPTIONS...]: a fresh job of the input with the steered processor.
prep() {
  local j=$1 n=$2; shift 2
  rm -rf "$j"; rm -f "$j".*
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards "$n" \
    --process-cmd "$PROC" --job-dir "$j" "$@"
}
folders() { find "$1/attempts/$2" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }
statuses() {
  python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "attempts", sys.argv[2], "*", "attempt.json"))):
    print(json.load(open(p)).get("status"))
PY
}
S=part-00000-of-00001

# ==== (a) heartbeat during materialize
J=$T/a
prep "$J" 1 --lease-secs 2 --heartbeat-secs 0.4 --poll-interval-secs 1
touch "$J.parts"
# Each of the three part files waits 1.5 s before it is copied: 4.5 s of materializing, more
# than twice the lease, with no child running.
ESHARD_TEST_HOOK_MATERIALIZE_SOURCE="touch $T/a.copying; sleep 1.5" "$BIN" worker --job-dir "$J" --no-backup \
  >"$T/a1.out" 2>"$T/a1.err" &
w1=$!
wait_for 20 test -e "$T/a.copying"
"$BIN" worker --job-dir "$J" --no-backup >"$T/a2.out" 2>"$T/a2.err" &
w2=$!
rc1=0; wait "$w1" || rc1=$?
rc2=0; wait "$w2" || rc2=$?
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] || { cat "$T"/a1.* "$T"/a2.*; fail "(a) workers exited $rc1 and $rc2"; }
! grep -q "Claimed" "$T/a2.out" || { cat "$T/a2.out"; fail "(a) the second worker took the shard over while its result was copied"; }
grep -q "Finished $S: done" "$T/a1.out" || { cat "$T/a1.out" "$T/a1.err"; fail "(a) the first worker did not publish its result"; }
[ "$(folders "$J" "$S")" = 1 ] || fail "(a) attempts: $(statuses "$J" "$S" | tr '\n' ' ')"
[ -z "$(ls -A "$J/state/stale_locks" 2>/dev/null)" ] || fail "(a) a lock was taken over"
pass "(a) a 4.5 s materialize under a 2 s lease keeps its lease: no takeover, one attempt"

# ==== (b) a node that lacks the processor: prepare (where it exists) accepts the job; a worker
# where it is missing refuses before it claims anything (issue 32: checked at worker start).
J=$T/b
mkdir -p "$T/b-bin" && cp "$T/proc.sh" "$T/b-bin/proc.sh"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 2 \
  --process-cmd "$T/b-bin/proc.sh {input} {output} {job_dir}" --job-dir "$J" --max-retries 0
rm -rf "$T/b-bin"
for k in 1 2 3; do
  run_expect 2 "$BIN" worker --job-dir "$J"
  expect_err "--process-cmd: program '$T/b-bin/proc.sh' does not exist on $(hostname)"
  ! grep -q "Claimed" "$T/out" || fail "(b) a worker that cannot start its processor claimed a shard"
done
[ -z "$(ls -A "$J/state/failed")" ] || fail "(b) a shard was failed by a node that cannot start the processor"
[ -z "$(ls -A "$J/state/locks")" ] || fail "(b) a lock was taken: $(ls "$J/state/locks")"
[ -z "$(ls -A "$J/attempts" 2>/dev/null)" ] || fail "(b) attempts were made: $(ls -R "$J/attempts")"
run_expect 1 "$BIN" status --job-dir "$J"
mkdir -p "$T/b-bin" && cp "$T/proc.sh" "$T/b-bin/proc.sh"
run_expect 0 "$BIN" worker --job-dir "$J"
expect_out "All 2 shards completed"
pass "(b) a node without the processor: the worker exits 2 before any claim; with --max-retries 0 the shard still runs once it can"

# ==== (d) SIGTERM to rank 0 during prepare and merge under mpirun run
J=$T/d
rm -rf "$J" "$T"/.d.preparing.*
RUN=("$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 3 --process-cmd "$PROC" --job-dir "$J"
  --poll-interval-secs 120)
# The hook runs in rank 0's prepare after its scan, as a child of the rank: it signals its parent.
ranks_reset
start=$(date +%s)
export ESHARD_TEST_HOOK_AFTER_SCAN='kill -TERM $PPID'
run_expect 0 timeout 60 "$MPIRUN" $RANKS_NOABORT -np 2 -x ESHARD_TEST_HOOK_AFTER_SCAN "$T/rank.sh" "${RUN[@]}"
unset ESHARD_TEST_HOOK_AFTER_SCAN
ranks_expect 2 143
# Stopped at once: no rank waits for a poll (120 s here; mpirun's timeout is 60 s). The ranks'
# own span (ranks_span) leaves out mpirun's start and end, which grow with the machine's load.
span=$(ranks_span)
python3 -c "import sys; sys.exit(0 if $span < 40 else 1)" || fail "(d) stopping prepare took $span s ($(($(date +%s) - start)) s in all)"
! grep -q 'Worker .* started' "$T/out" || fail "(d) a worker started after prepare was stopped"
no_job_left "$J"
pass "(d) SIGTERM to rank 0 in prepare: every rank exits 143, no job or stage folder left"
ranks_reset
export ESHARD_TEST_HOOK_MERGE_SHARD='kill -TERM $PPID'
run_expect 0 timeout 60 "$MPIRUN" $RANKS_NOABORT -np 2 -x ESHARD_TEST_HOOK_MERGE_SHARD "$T/rank.sh" "${RUN[@]}"
unset ESHARD_TEST_HOOK_MERGE_SHARD
ranks_expect 2 143
! grep -q '^PASS' "$T/out" || fail "(d) PASS printed although merge was stopped"
[ ! -e "$J/merged.jsonl" ] || fail "(d) a stopped merge left its output"
[ -z "$(find "$J" -name '.*.tmp')" ] || fail "(d) a stopped merge left a temporary: $(find "$J" -name '.*.tmp')"
ranks_reset
run_expect 0 timeout 60 "$MPIRUN" -np 2 "$T/rank.sh" "${RUN[@]}"
ranks_expect 2 0
expect_out "PASS: 3 shards were completed"
cmp -s "$T/in.jsonl" <(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l); d.pop("global_index", None); print(json.dumps(d))' "$J/merged.jsonl") ||
  fail "(d) the resumed job's output is not its input"
pass "(d) SIGTERM to rank 0 in merge: every rank exits 143, no output or temporary; the same command then passes"

# ==== (e) the failure count is taken while holding the lock
# --max-retries 1: two failed or stale attempts are allowed. Attempt 1 fails and is released.
# B then finds the shard free and counts its attempts, and waits (hook) before its exclusive
# create. Attempt 2 starts and its worker is SIGKILLed; C takes the stale lock over (attempt 2
# is marked stale, the lock moved away) and, before C's own create, lets B go: B wins the
# create. B must count the failures now (two: the limit), not use its count from before.
J=$T/e
prep "$J" 1 --max-retries 1 --lease-secs 1 --heartbeat-secs 0.2 --poll-interval-secs 1
touch "$J.fail"
run_expect 2 "$BIN" worker --job-dir "$J" --max-shards 1
[ "$(statuses "$J" "$S")" = failed ] || fail "(e) attempt 1: $(statuses "$J" "$S")"
rm -f "$J.fail" "$T/e.go" "$T/e.b"
ESHARD_TEST_HOOK_BEFORE_CLAIM_CREATE="touch $T/e.b; while [ ! -e $T/e.go ]; do sleep 0.05; done" \
  "$BIN" worker --job-dir "$J" --max-shards 1 --no-backup >"$T/eb.out" 2>"$T/eb.err" &
wb=$!
wait_for 20 test -e "$T/e.b"
touch "$J.hang"
setsid "$BIN" worker --job-dir "$J" --max-shards 1 --no-backup >"$T/ea.out" 2>&1 &
wa=$!
wait_for 20 test -e "$J/state/locks/$S.lock"
wait_for 20 grep -q "Claimed $S (attempt 2)" "$T/ea.out"
kill -KILL -- -"$wa"
wait "$wa" 2>/dev/null || true
rm -f "$J.hang"
sleep 1.2
ESHARD_TEST_HOOK_BEFORE_CLAIM_CREATE="touch $T/e.go; sleep 2" \
  "$BIN" worker --job-dir "$J" --max-shards 1 --no-backup >"$T/ec.out" 2>"$T/ec.err" || true
rcb=0; wait "$wb" || rcb=$?
grep -q "stale_takeover\|took over\|Took over" "$T/ec.out" "$T/ec.err" "$J"/state/events/*.jsonl ||
  { cat "$T/ec.out" "$T/ec.err"; fail "(e) C did not take the stale lock over"; }
[ "$(folders "$J" "$S")" = 2 ] || { cat "$T/eb.out" "$T/eb.err"; fail "(e) a claimer ran an attempt over the limit: $(statuses "$J" "$S" | tr '\n' ' ')"; }
[ "$(statuses "$J" "$S" | tr '\n' ' ')" = "failed stale " ] || fail "(e) attempts: $(statuses "$J" "$S" | tr '\n' ' ')"
[ "$(json_get "$J/state/failed/$S.json" '["reason"]')" = "retry limit reached before claim" ] || fail "(e) failed record: $(cat "$J/state/failed/$S.json")"
[ "$rcb" = 2 ] || { cat "$T/eb.out" "$T/eb.err"; fail "(e) B exited $rcb, expected 2 (the shard failed)"; }
pass "(e) a claim that won the create after a takeover counts the stale attempt: no attempt over --max-retries"

# ==== (c) retry after a crash between the failed record and its fence
# The default lease (120 s): retry must not wait for it, since the lock's own attempt published
# the failed record (the record carries the lock's token).
J=$T/c
prep "$J" 1 --max-retries 0
touch "$J.fail"
run_expect 99 env ESHARD_TEST_CRASH_AT=failed-before-fence "$BIN" worker --job-dir "$J"
[ -e "$J/state/failed/$S.json" ] || fail "(c) no failed record after the crash"
[ "$(json_get "$J/state/locks/$S.lock" '.get("status", "running")')" = running ] || fail "(c) the lock is already a fence"
[ "$(json_get "$J/state/locks/$S.lock" '["token"]')" = "$(json_get "$J/state/failed/$S.json" '["token"]')" ] ||
  fail "(c) the failed record does not carry the lock's token"
rm -f "$J.fail"
run_expect 0 "$BIN" retry --job-dir "$J" --all-failed
expect_out "Requeued $S"
[ ! -e "$J/state/locks/$S.lock" ] && [ ! -e "$J/state/failed/$S.json" ] || fail "(c) retry left the lock or the record"
run_expect 0 "$BIN" worker --job-dir "$J"
expect_out "All 1 shards completed"
# A running lock of another token (a live claim) still refuses, and nothing moves.
prep "$J" 1 --max-retries 0
touch "$J.fail"
run_expect 99 env ESHARD_TEST_CRASH_AT=failed-before-fence "$BIN" worker --job-dir "$J"
python3 - "$J/state/locks/$S.lock" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["token"] = "f" * 32
open(sys.argv[1], "w").write(json.dumps(d))
PY
run_expect 2 "$BIN" retry --job-dir "$J" --all-failed
expect_err "Cannot retry $S: a lock still exists"
[ -e "$J/state/failed/$S.json" ] && [ -d "$J/attempts/$S" ] || fail "(c) a refused retry moved something"
pass "(c) retry after a crash between the failed record and the fence requeues at once; a live lock of another attempt still refuses"

# ==== (f) a retry that checked its targets before the shard was requeued and claimed again
# B checks (the shard failed, its fence in place) and waits before its moves; A requeues it and
# a worker claims it (its processor hangs: a live claim with a running lock); then B goes on. B
# must leave the claim alone: its lock, its attempt folder, and the worker publishes its result.
J=$T/f
prep "$J" 1 --max-retries 0 --lease-secs 2 --heartbeat-secs 0.4 --poll-interval-secs 1
touch "$J.fail"
run_expect 2 "$BIN" worker --job-dir "$J"
rm -f "$J.fail" "$T/f.go" "$T/f.b"
ESHARD_TEST_HOOK_RETRY_BEFORE_MOVES="touch $T/f.b; while [ ! -e $T/f.go ]; do sleep 0.05; done" \
  "$BIN" retry --job-dir "$J" --all-failed >"$T/fb.out" 2>"$T/fb.err" &
rb=$!
wait_for 20 test -e "$T/f.b"
run_expect 0 "$BIN" retry --job-dir "$J" --all-failed
expect_out "Requeued $S"
touch "$J.wait"
"$BIN" worker --job-dir "$J" --no-backup >"$T/fw.out" 2>"$T/fw.err" &
ww=$!
wait_for 20 test -e "$J.started"
live=$(json_get "$J/state/locks/$S.lock" '["attempt_dir"]')
touch "$T/f.go"
rc=0; wait "$rb" || rc=$?
[ "$rc" = 0 ] || { cat "$T/fb.out" "$T/fb.err"; fail "(f) the late retry exited $rc"; }
[ -d "$J/$live" ] || fail "(f) the late retry moved the live claim's attempt folder $live"
[ "$(json_get "$J/state/locks/$S.lock" '["attempt_dir"]')" = "$live" ] || fail "(f) the live claim's lock was moved"
grep -q "Skipped $S: it was requeued meanwhile by another retry" "$T/fb.out" || { cat "$T/fb.out" "$T/fb.err"; fail "(f) the late retry did not skip the shard"; }
touch "$J.release"
rc=0; wait "$ww" || rc=$?
[ "$rc" = 0 ] || { cat "$T/fw.out" "$T/fw.err"; fail "(f) the worker exited $rc"; }
grep -q "Finished $S: done" "$T/fw.out" || { cat "$T/fw.out" "$T/fw.err"; fail "(f) the live claim did not publish"; }
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/f.jsonl"
pass "(f) a retry that checked before the shard was requeued and claimed skips it: the live claim keeps its lock and attempt folder and publishes"

# ==== a dead owner's temporaries go with its lease (found by test_chaos)
# A worker on another host (its own UTS namespace, named elsewhere) is SIGKILLed while it
# materializes: its .processed.jsonl.<token>.tmp stays in its attempt folder, and merge's sweep
# cannot judge a maker on another host for an hour. The stale takeover removes it.
J=$T/g
prep "$J" 1 --lease-secs 1 --heartbeat-secs 0.2 --poll-interval-secs 1
touch "$J.parts"
rc=0
ESHARD_TEST_HOOK_MATERIALIZE_SOURCE='kill -KILL $PPID' unshare --uts sh -c 'hostname elsewhere; exec "$@"' sh \
  "$BIN" worker --job-dir "$J" --no-backup >"$T/g1.out" 2>&1 || rc=$?
[ "$rc" = 137 ] || { cat "$T/g1.out"; fail "(g) the worker was not killed in materialize (exit $rc)"; }
[ -n "$(find "$J/attempts" -name '.processed.jsonl.*.tmp')" ] || fail "(g) no temporary to clean up"
rm -f "$J.parts"
sleep 1.1
run_expect 0 "$BIN" worker --job-dir "$J" --no-backup
[ "$(statuses "$J" "$S" | tr '\n' ' ')" = "stale done " ] || fail "(g) attempts: $(statuses "$J" "$S" | tr '\n' ' ')"
[ -z "$(find "$J" -name '.*.tmp')" ] || fail "(g) the dead owner's temporary is left: $(find "$J" -name '.*.tmp')"
expect_err "a temporary file left by a worker whose shard was taken over"
pass "(g) a stale takeover removes the temporaries of the dead owner's attempt"
