#!/usr/bin/env bash
# A preemption is never a failure, with real Data-Juicer in the per-rank runner: a scheduler
# that stops the job signals every process of it, so the runner's client (the attempt's
# processor), the persistent runner or the rank's Ray head may die before the worker gets its
# own SIGTERM. Each round does that to a running shard, then SIGTERMs the worker 0.1-0.3 s later:
# the attempt must be preempted, nothing failed, no lock left; a rerun completes the job.
. "$(dirname "$0")/lib_dj.sh"
cd "$SRC"
our_ray() { mine 'eshard-ray-|dj_runner.py serve'; }

FLAG=$T/slow
cat >"$T/recipe.yaml" <<EOF
executor_type: ray
ray_address: local
text_keys: text
custom_operator_paths: ['$SRC/tests/dj/custom_ops/eshard_slow_ops.py']
process:
  - eshard_test_slow_mapper:
      flag: '$FLAG'
      seconds: 1
  - whitespace_normalization_mapper:
EOF
J=$T/job
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path configs/demo-data --job-dir "$J" \
  --num-shards 4 --python "$PY" --dj-process "$DJ"

statuses() {
  python3 - "$J" <<'PY'
import glob, json, os, sys
print(" ".join(sorted(json.load(open(p)).get("status", "?")
                      for p in glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json")))))
PY
}
# victims WHAT: the pids a scheduler's signal would hit first in this round.
victims() {
  case $1 in
    client) mine 'dj_runner.py run --socket' | cut -d' ' -f1 ;;
    runner) mine 'dj_runner.py serve' | cut -d' ' -f1 ;;
    all) mine 'dj_runner.py (run|serve)|eshard-ray-.*(raylet|gcs_server)' | cut -d' ' -f1 ;;
  esac
}
round=0
for what in client runner all; do
  round=$((round + 1))
  touch "$FLAG"
  rm -f "$FLAG.running"
  "$BIN" worker --job-dir "$J" --ray-mode per-rank >"$T/w.$round.out" 2>&1 &
  W=$!
  for _ in $(seq 1 1200); do [ -e "$FLAG.running" ] && break; kill -0 "$W" 2>/dev/null || break; sleep 0.1; done
  [ -e "$FLAG.running" ] || { cat "$T/w.$round.out"; fail "round $round: no shard started within 120 s"; }
  grep -q 'Started the persistent Data-Juicer runner' "$T/w.$round.out" || fail "round $round: no persistent runner"
  pids=$(victims "$what")
  [ -n "$pids" ] || fail "round $round: no process to signal for '$what'"
  # shellcheck disable=SC2086
  kill -TERM $pids
  sleep "0.$round"
  kill -TERM "$W"
  rc=0; wait "$W" || rc=$?
  [ "$rc" = 143 ] || { cat "$T/w.$round.out"; fail "round $round ($what first): worker exit $rc, expected 143"; }
  st=$(statuses)
  case " $st " in
    *" failed "*|*" running "*) cat "$T/w.$round.out"; fail "round $round ($what first): attempt statuses: $st" ;;
  esac
  [ "$(echo "$st" | tr ' ' '\n' | grep -c '^preempted$')" = "$round" ] || { cat "$T/w.$round.out"; fail "round $round ($what first): statuses $st"; }
  [ -z "$(ls -A "$J/state/failed")" ] || fail "round $round: a failed marker was written"
  [ -z "$(running_locks "$J")" ] || fail "round $round: a running lock was left: $(running_locks "$J")"
  for _ in $(seq 1 50); do [ -z "$(our_ray)" ] && break; sleep 0.2; done
  [ -z "$(our_ray)" ] || { our_ray; fail "round $round: Ray processes left after the stop"; }
  pass "round $round: SIGTERM to the $what first, the worker 0.$round s later: preempted"
done

rm -f "$FLAG"
run_expect 0 "$BIN" worker --job-dir "$J" --ray-mode per-rank
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/merged.jsonl"
[ "$(wc -l <"$T/merged.jsonl")" = 64 ] || fail "the rerun merged $(wc -l <"$T/merged.jsonl") rows, expected 64"
pass "the rerun completes the job (64 rows), no failure counted"
