#!/bin/bash
# Backup attempts (speculative execution): an idle worker runs a second attempt of an overdue
# shard; the first done record wins, the other attempt is stopped at once and recorded as
# superseded; exactly-once holds and the output is byte-identical to a one-process run.
#   1. mpirun -np 2 on two fake hosts, node2 12x slower (1 s against 12 s per shard), 4 shards:
#      the job ends in under 8 s (14.5 s without backups), the backup won, node2's primary is
#      superseded and its lock is the done fence; the reference's status and merge read it.
#   2. A backup that loses: the primary's first run takes 4 s, any second run of that shard
#      takes 60 s: the backup is stopped as soon as the primary publishes, and the job does
#      not wait for it.
#   3. Two workers, the primary one SIGKILLed after the backup won: the survivor waits for
#      the dead primary's lease, takes its lock over and writes the fence; nothing is left
#      running.
#   4. --no-backup: an idle worker waits for the slow shard instead.
# Backups never count toward the retry limit (--max-retries 0 here: one counted failure would
# fail the shard).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 2
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"id": i, "text": "backup row %d " % i + "b" * (i % 23)}) + "\n")
PY
IN=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 4)

# The one-process reference output.
cat >"$T/cp.sh" <<'EOF'
#!/bin/sh
cp "$1" "$2"
EOF
chmod +x "$T/cp.sh"
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/ref" --process-cmd "$T/cp.sh {input} {output}"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"

# exactly_once_result JOB OUTPUT [STALE_OK]: identical output, one done record per shard whose
# token is the one attempt that says done, no running lock left, and the reference's status and
# merge agree.
exactly_once_result() {
  local job=$1 out=$2 stale_ok=${3:-0}
  cmp -s "$T/ref.jsonl" "$out" || fail "$job: merged output differs from the one-process run"
  local stale=()
  [ "$stale_ok" = 1 ] && stale=(--stale-ok)
  exactly_once "$job" --uncounted "${stale[@]}" || fail "$job: not exactly one accepted attempt per shard"
  [ -z "$(running_locks "$job")" ] || fail "$job: running locks left: $(running_locks "$job")"
  python3 "$SRC/tests/e2e/ref_jobs.py" status "$job" >"$T/ref-status.json" || fail "$job: the reference's status is not complete"
  python3 "$SRC/tests/e2e/ref_jobs.py" merge "$job" "$T/ref-merge.jsonl" || fail "$job: the reference's merge refuses it"
  cmp -s "$T/ref.jsonl" "$T/ref-merge.jsonl" || fail "$job: the reference's merge differs"
}

# attempts JOB: "shard host status backup" per attempt, sorted.
attempts() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json"))):
    a = json.load(open(p))
    print(a["shard_id"], a["hostname"], a["status"], "backup" if a.get("backup") else "primary")
PY
}

# ---- 1. a straggler host
# node2's processor sleeps 30 s and then leaves a mark; the others take 1 s.
cat >"$T/slow-host.sh" <<EOF
#!/bin/sh
if [ "\$(hostname)" = node2 ]; then sleep 30; touch "$T/straggler-slept"; else sleep 1; fi
cp "\$1" "\$2"
EOF
chmod +x "$T/slow-host.sh"
J=$T/straggler
t0=$(now)
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 2 $FAKEHOSTS_PER_NODE_1 "$T/rank.sh" "$BIN" run "${IN[@]}" --job-dir "$J" \
  --max-retries 0 --poll-interval-secs 1 --process-cmd "$T/slow-host.sh {input} {output}" >"$T/out" 2>"$T/err" ||
  { cat "$T/out" "$T/err"; fail "the straggler job failed"; }
wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
ranks_expect 2 0
expect_out "PASS: 4 shards were completed by"
# The backup ended the job before the straggler's own attempt could: the straggler never got
# to its mark, its child was stopped when the backup's record appeared. (How long the job took
# is a figure for tests/bench/backup.sh, not a condition: a busy machine makes it slower.)
[ ! -e "$T/straggler-slept" ] || fail "the job waited for the straggler's own attempt (wall $wall s)"
grep -q '^.*Backup of part-' "$T/out" || { cat "$T/out"; fail "no backup was started"; }
attempts "$J" >"$T/att"
grep -q ' node1 done backup$' "$T/att" || { cat "$T/att"; fail "the backup on node1 did not win"; }
grep -q ' node2 superseded primary$' "$T/att" || { cat "$T/att"; fail "node2's primary was not recorded as superseded"; }
echo "straggler job: $wall s in all"
exactly_once_result "$J" "$J/merged.jsonl"
grep -h '"event": *"backup"' "$J"/state/events/*.jsonl >/dev/null || fail "no backup event in state/events"
grep -q '<g class="attempt" data-shard="part-[0-9-]*of-00004" data-host="node1" data-status="done" [^>]*data-backup="1"' "$J/report.html" ||
  fail "run's report does not show the backup that won"
grep -q 'data-host="node2" data-status="superseded"' "$J/report.html" || fail "run's report does not show the superseded primary"
pass "straggler: node2 30x slower, 4 shards; the backup won, node2's primary superseded, exactly once"

# ---- 2. a backup that loses
F=$T/flags
mkdir -p "$F"
cat >"$T/first-fast.sh" <<EOF
#!/bin/sh
# shard 1: the first run takes 4 s, a second (the backup) 60 s and then leaves a mark; the
# others 0.5 s.
case "\$3" in
  part-00001-*) if mkdir "$F/\$3" 2>/dev/null; then sleep 4; else sleep 60; touch "$F/backup-slept"; fi ;;
  *) sleep 0.5 ;;
esac
cp "\$1" "\$2"
EOF
chmod +x "$T/first-fast.sh"
J=$T/loses
t0=$(now)
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 2 $FAKEHOSTS_PER_NODE_1 "$T/rank.sh" "$BIN" run "${IN[@]}" --job-dir "$J" \
  --max-retries 0 --poll-interval-secs 1 --process-cmd "$T/first-fast.sh {input} {output} {shard_id}" >"$T/out" 2>"$T/err" ||
  { cat "$T/out" "$T/err"; fail "the job with a losing backup failed"; }
wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
ranks_expect 2 0
attempts "$J" >"$T/att"
grep -q '^part-00001-of-00004 .* superseded backup$' "$T/att" || { cat "$T/att" "$T/out"; fail "the losing backup is not recorded as superseded"; }
grep -q '^part-00001-of-00004 .* done primary$' "$T/att" || { cat "$T/att"; fail "the primary did not win"; }
[ ! -e "$F/backup-slept" ] || fail "the job waited for the losing backup ($wall s)"
exactly_once_result "$J" "$J/merged.jsonl"
pass "a backup that loses is stopped when the primary publishes (job $wall s, the backup would take 60 s)"

# ---- 3. the primary dies after the backup won
rm -rf "$F"; mkdir -p "$F"
cat >"$T/slow-first.sh" <<EOF
#!/bin/sh
# shard 1: the first run takes 120 s (its worker is killed), a second 3 s; the others 0.5 s.
case "\$3" in
  part-00001-*) if mkdir "$F/\$3" 2>/dev/null; then echo \$\$ >"$F/primary.pid"; sleep 120; else sleep 3; fi ;;
  *) sleep 0.5 ;;
esac
cp "\$1" "\$2"
EOF
chmod +x "$T/slow-first.sh"
J=$T/dies
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J" --max-retries 0 --lease-secs 3 --heartbeat-secs 1 \
  --process-cmd "$T/slow-first.sh {input} {output} {shard_id}"
# Worker A takes shards 0 and 1 (the slow one); worker B the rest, then it backs shard 1 up,
# and A is killed while the backup runs, so it can never fence the backup's record itself.
"$BIN" worker --job-dir "$J" --poll-interval-secs 1 >"$T/a.out" 2>&1 &
A=$!
wait_for 20 test -s "$F/primary.pid"
timeout 60 "$BIN" worker --job-dir "$J" --poll-interval-secs 1 >"$T/b.out" 2>&1 &
B=$!
wait_for 40 grep -q "Backup of part-00001-of-00004" "$T/b.out"
kill -KILL "$A"
wait "$A" 2>/dev/null || true
kill "$(cat "$F/primary.pid")" 2>/dev/null || true
rc=0; wait "$B" || rc=$?
[ "$rc" = 0 ] || { cat "$T/a.out" "$T/b.out"; fail "the surviving worker exited $rc"; }
grep -q "Backup of part-00001-of-00004" "$T/b.out" || { cat "$T/a.out" "$T/b.out"; fail "worker B ran no backup"; }
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/dies.jsonl"
exactly_once_result "$J" "$T/dies.jsonl" 1
python3 - "$J" <<'PY' || fail "the dead primary's attempt is not marked stale"
import glob, json, os, sys
atts = [json.load(open(p)) for p in glob.glob(os.path.join(sys.argv[1], "attempts", "part-00001-of-00004", "*", "attempt.json"))]
sys.exit(0 if sorted((a["status"], bool(a.get("backup"))) for a in atts) == [("done", True), ("stale", False)] else 1)
PY
pass "the primary SIGKILLed after its backup won: the survivor took the dead lock over after its lease and fenced it"

# ---- 4. --no-backup
rm -rf "$F"; mkdir -p "$F"
J=$T/nobackup
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J" --max-retries 0 --process-cmd "$T/first-fast.sh {input} {output} {shard_id}"
"$BIN" worker --job-dir "$J" --poll-interval-secs 1 --no-backup >"$T/a.out" 2>&1 &
A=$!
"$BIN" worker --job-dir "$J" --poll-interval-secs 1 --no-backup >"$T/b.out" 2>&1 || fail "worker B failed"
wait "$A" || fail "worker A failed"
! grep -q "Backup of" "$T/a.out" "$T/b.out" || fail "--no-backup ran a backup"
[ "$(attempts "$J" | wc -l)" = 4 ] || { attempts "$J"; fail "--no-backup: expected exactly 4 attempts"; }
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/nb.jsonl"
exactly_once_result "$J" "$T/nb.jsonl"
pass "--no-backup: no backup attempt, 4 attempts for 4 shards"
