#!/bin/bash
# Nothing lost, proven at every step that publishes something: for each crash point (test
# builds: ESHARD_TEST_CRASH_AT=<name> makes the process _exit(99) there), the single commands
# (prepare, worker, retry, merge) and `mpirun -np 2 eshard-mpi run` are run with the crash, then
# again without it, and then:
#   - the merged output is byte-identical to a run without faults;
#   - every shard has exactly one done record, whose token is the one attempt that says done;
#   - no temporary, stage folder or running lock is left once the job is complete.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
need_test_hooks
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(80):
        f.write(json.dumps({"id": i, "text": "crash row %d " % i + "k" * (i % 17)}) + "\n")
PY
# The processor sleeps past one heartbeat, then copies; it fails while the file <job>.fail.<shard>
# exists beside the job folder (the crash points run in parallel, each with its own job).
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
if [ -e "$4.fail.$3" ]; then echo "failing $3 on purpose" >&2; exit 3; fi
sleep 0.3
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
S0=part-00000-of-00004
# prepare reads the input on three threads, cut into small ranges (its crash points
# prepare-mid-ranges and prepare-after-ranges come while and after they are read).
export ESHARD_TEST_RANGE_BYTES=700
POLICY=(--lease-secs 1 --heartbeat-secs 0.2 --poll-interval-secs 1)
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 4 --threads 3 --process-cmd "$T/proc.sh {input} {output} {shard_id} {job_dir}")
REF=$T/ref.jsonl
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"

# crashed CODE: 0 or 99 (the crash point), anything else is a failure of the test.
crashed() { [ "$1" = 0 ] || [ "$1" = 99 ] || fail "$point ($mode): exit $1, expected 0 or the crash (99)"; }
# clean_finish JOB OUTPUT: the three properties.
clean_finish() {
  local job=$1 out=$2
  cmp -s "$REF" "$out" || fail "$point ($mode): merged output differs from a run without faults"
  exactly_once "$job" || fail "$point ($mode): accepted results are not one per shard"
  [ -z "$(running_locks "$job")" ] || fail "$point ($mode): running locks left: $(running_locks "$job")"
  local debris
  debris=$(find "$job" "$(dirname "$out")" -maxdepth 6 \( -name '.*.tmp' -o -name '.*.preparing.*' \) | head -5)
  [ -z "$debris" ] || fail "$point ($mode): debris left: $debris"
  debris=$(find "$(dirname "$job")" -maxdepth 1 -name ".$(basename "$job").preparing.*" | head -3)
  [ -z "$debris" ] || fail "$point ($mode): stage folder left: $debris"
}
# after_lease: a killed worker's lock is taken over only after one lease without a change.
after_lease() { sleep 1.1; }

# ---- single commands
single() {
  local J=$T/s-$point rc
  rm -rf "$J" "$T/s-$point.jsonl"; rm -f "$J".fail.*
  export ESHARD_TEST_CRASH_AT=$point
  rc=0; "$BIN" prepare "${COMMON[@]}" "${POLICY[@]}" --max-retries 1 --job-dir "$J" >/dev/null 2>&1 || rc=$?
  crashed "$rc"
  unset ESHARD_TEST_CRASH_AT
  [ "$rc" = 0 ] || run_expect 0 "$BIN" prepare "${COMMON[@]}" "${POLICY[@]}" --max-retries 1 --job-dir "$J"
  case $point in
    failed-*|release-*|retry-*) touch "$J.fail.$S0" ;;
  esac
  export ESHARD_TEST_CRASH_AT=$point
  rc=0; "$BIN" worker --job-dir "$J" >"$T/w.out" 2>&1 || rc=$?
  unset ESHARD_TEST_CRASH_AT
  [ "$rc" = 0 ] || [ "$rc" = 2 ] || [ "$rc" = 99 ] || { cat "$T/w.out"; fail "$point (single): worker exit $rc"; }
  if [ -e "$J.fail.$S0" ]; then
    # Let the shard fail for good (the crash, if any, interrupted its failure), then requeue it.
    after_lease
    rc=0; "$BIN" worker --job-dir "$J" >"$T/w.out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || { cat "$T/w.out"; fail "$point (single): the failing shard did not end failed (exit $rc)"; }
    rm -f "$J.fail.$S0"
    export ESHARD_TEST_CRASH_AT=$point
    rc=0; "$BIN" retry --job-dir "$J" --all-failed >/dev/null 2>&1 || rc=$?
    crashed "$rc"
    unset ESHARD_TEST_CRASH_AT
    run_expect 0 "$BIN" retry --job-dir "$J" --all-failed
  fi
  after_lease
  run_expect 0 "$BIN" worker --job-dir "$J"
  # A record's temporary left by the crash (publish-after-*) is gone once its lease was taken
  # over, before the merge (which sweeps the job folder too).
  local left
  left=$(find "$J/state/done" "$J/state/failed" -name '.*.tmp' | head -3)
  [ -z "$left" ] || fail "$point (single): record temporaries left after the takeover: $left"
  export ESHARD_TEST_CRASH_AT=$point
  rc=0; "$BIN" merge --job-dir "$J" --output "$T/s-$point.jsonl" >/dev/null 2>&1 || rc=$?
  crashed "$rc"
  unset ESHARD_TEST_CRASH_AT
  run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/s-$point.jsonl" --overwrite
  clean_finish "$J" "$T/s-$point.jsonl"
}

# ---- mpirun -np 2 run
run_mode() {
  local J=$T/m-$point rc
  rm -rf "$J"; rm -f "$J".fail.*
  local extra=()
  case $point in
    failed-*|release-*|retry-*)
      # The shard fails for good first (exit 2), then the crash comes in the requeueing run.
      touch "$J.fail.$S0"
      ranks_reset
      rc=0; $MPIRUN -np 2 "$BIN" run "${COMMON[@]}" "${POLICY[@]}" --max-retries 1 --job-dir "$J" >"$T/m.out" 2>&1 || rc=$?
      [ "$rc" = 2 ] || { tail -20 "$T/m.out"; fail "$point (run): the failing job exited $rc, expected 2"; }
      rm -f "$J.fail.$S0"
      extra=(--retry-failed)
      case $point in failed-*|release-*) touch "$J.fail.$S0" ;; esac
      ;;
  esac
  ranks_reset
  rc=0; ESHARD_TEST_CRASH_AT=$point $MPIRUN -np 2 -x ESHARD_TEST_CRASH_AT "$BIN" run "${COMMON[@]}" "${POLICY[@]}" --max-retries 1 \
    --job-dir "$J" "${extra[@]}" >"$T/m.out" 2>&1 || rc=$?
  [ "$rc" != 0 ] || grep -q '^PASS' "$T/m.out" || { tail -20 "$T/m.out"; fail "$point (run): exit 0 without PASS"; }
  rm -f "$J.fail.$S0"
  after_lease
  # Resubmit with --retry-failed until PASS: a crash inside a failing shard's last attempt
  # leaves its failures real, so the first resubmission may find the shard failed (its limit
  # reached) and the next one requeues it.
  local k
  for k in 1 2; do
    ranks_reset
    rc=0; $MPIRUN -np 2 "$BIN" run "${COMMON[@]}" "${POLICY[@]}" --max-retries 1 --job-dir "$J" --retry-failed \
      >"$T/out" 2>"$T/err" || rc=$?
    [ "$rc" = 0 ] && break
    [ "$rc" = 2 ] && grep -q 'Job finished with failures' "$T/err" || { cat "$T/out" "$T/err"; fail "$point (run): resubmission exited $rc"; }
  done
  [ "$rc" = 0 ] || { cat "$T/out" "$T/err"; fail "$point (run): no PASS after two resubmissions"; }
  expect_out "PASS: 4 shards were completed"
  clean_finish "$J" "$J/merged.jsonl"
}

POINTS=$(grep -ohE 'es_crash_point\("[a-z-]+"\)|"[a-z]+-(before|after|mid|while)-[a-z-]+"|"worker-child-running"' "$SRC"/src/*.c "$SRC"/mpi/*.c |
  grep -oE '[a-z]+(-[a-z]+)+' | sort -u)
n=$(echo "$POINTS" | wc -l)
[ "$n" -ge 10 ] || fail "only $n crash points found in the sources"
# The points run CRASH_MATRIX_JOBS at a time (default 4: the runs mostly wait on leases), each
# in its own folder under $T with its own log, shown when it fails.
JOBS=${CRASH_MATRIX_JOBS:-4}
TOP=$T
one_point() {
  T=$TOP/p-$point
  mkdir -p "$T/ranks"
  mode=single; single
  mode=run; run_mode
  pass "crash point $point: single commands and mpirun -np 2 run recover; output identical, one accepted result per shard, no debris"
}
declare -A PID
for point in $POINTS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  one_point >"$TOP/log.$point" 2>&1 &
  PID[$point]=$!
done
bad=0
for point in $POINTS; do
  if wait "${PID[$point]}"; then
    cat "$TOP/log.$point"
  else
    echo "--- $point"; tail -40 "$TOP/log.$point"; bad=1
  fi
done
T=$TOP
[ "$bad" = 0 ] || fail "some crash points lost or doubled work (logs above)"
pass "$n crash points: $(echo $POINTS | tr ' ' ',')"
