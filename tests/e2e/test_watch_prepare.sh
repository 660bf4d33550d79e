#!/bin/bash
# status of a job still being prepared (issue 35, item 6): the job folder does not exist yet,
# its stage folder "<parent>/.<name>.preparing.<hex>" does. status --watch says prepare is under
# way and waits, then shows the job; a single status exits 2 saying that prepare is under way;
# the stage folder a killed prepare left (its maker gone) is no prepare under way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh" # wait_for
need_test_hooks
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
write_recipe "$T/recipe.yaml"
printf '{"id":%d,"text":"row %d"}\n' 1 1 2 2 3 3 4 4 >"$T/in.jsonl"
printf '#!/bin/sh\ncp "$1" "$2"\n' >"$T/cp.sh"
chmod +x "$T/cp.sh"
J=$T/jobs/j1
PREP=(prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 2
      --process-cmd "$T/cp.sh {input} {output}")

# A prepare held after its first pass (the stage folder exists, the job folder not yet) until
# $T/go appears.
ESHARD_TEST_HOOK_AFTER_SCAN="touch '$T/scanned'; while [ ! -e '$T/go' ]; do sleep 0.1; done" \
  "$BIN" "${PREP[@]}" >"$T/prep.out" 2>"$T/prep.err" &
prep=$!
trap 'touch "$T/go"; kill "$prep" 2>/dev/null || true; test_done' EXIT
wait_for 30 test -e "$T/scanned"
stage=$(ls -d "$T/jobs/.j1.preparing."*)
[ ! -e "$J" ] || fail "the job folder exists before prepare published it"

run_expect 2 "$BIN" status --job-dir "$J"
expect_err "ERROR: Job manifest not found in $J: prepare is under way (stage folder $stage, last change "
expect_err "('eshard-mpi status --watch' waits for it)"
run_expect 2 "$BIN" status --job-dir "$J" --json
expect_err "prepare is under way"
pass "status of a job being prepared: exit 2, saying that prepare is under way"

"$BIN" status --job-dir "$J" --watch --interval 0.3 >"$T/watch.out" 2>"$T/watch.err" &
watch=$!
two_snapshots() { [ "$(grep -c 'has no manifest yet: prepare is under way' "$T/watch.out")" -ge 2 ]; }
wait_for 30 two_snapshots
kill -0 "$watch" 2>/dev/null || { cat "$T/watch.out" "$T/watch.err"; fail "status --watch ended while prepare ran"; }
touch "$T/go"
wait "$prep" || { cat "$T/prep.err"; fail "the held prepare failed"; }
run_expect 0 "$BIN" worker --job-dir "$J"
got=0; timeout 30 tail --pid="$watch" -f /dev/null || got=$?
[ "$got" = 0 ] || { cat "$T/watch.out"; kill "$watch"; fail "status --watch did not end once the job completed"; }
wait "$watch" || { cat "$T/watch.out" "$T/watch.err"; fail "status --watch of the completed job exited non-zero"; }
grep -q "^Job $J has no manifest yet: prepare is under way (stage folder $stage, last change [0-9]* s ago); waiting$" "$T/watch.out" ||
  { cat "$T/watch.out"; fail "--watch did not say that prepare is under way"; }
grep -q ', complete$' "$T/watch.out" || { cat "$T/watch.out"; fail "--watch did not go on to the prepared job"; }
[ ! -s "$T/watch.err" ] || { cat "$T/watch.err"; fail "--watch printed errors while prepare ran"; }
pass "status --watch of a job being prepared: waits, then shows the job until it completes"

# A prepare killed after its first pass leaves its stage folder; its maker is gone, so status
# says there is no job, at once, also with --watch.
J2=$T/jobs/j2
ESHARD_TEST_HOOK_AFTER_SCAN='kill -KILL $PPID' "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$J2" --num-shards 2 >/dev/null 2>&1 && fail "the killed prepare exited 0"
ls -d "$T/jobs/.j2.preparing."* >/dev/null || fail "the killed prepare left no stage folder"
run_expect 2 "$BIN" status --job-dir "$J2"
expect_err "ERROR: Job manifest not found: $J2/manifest.json"
run_expect 2 timeout 10 "$BIN" status --job-dir "$J2" --watch --interval 0.3
expect_err "Job manifest not found"
pass "the stage folder of a killed prepare: no prepare under way, status and --watch exit 2"
