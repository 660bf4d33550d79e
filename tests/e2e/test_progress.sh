#!/bin/bash
# Seeing a job (issue 10, items 1-4) under real mpirun with 2 ranks and a shell processor:
#  1. failures explained: a shard that always fails and one that fails once; run's end, status
#     (text and --json) give the error, the attempt's log path and the log's last lines (bounded);
#     merge and verify on the incomplete job say what to do;
#  2. live progress lines on rank 0 (--progress-secs), once-only end lines, the end summary;
#  3. status's rate and ETA: none for a terminal job;
#  4. status --prometheus of the real job, parsed with Python; status --watch (not a TTY) until
#     the job completes, and with --count.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(240):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "w" * (i * 7 % 43)}) + "\n")
PY
# The processor copies its shard after a short nap; flag files make it fail always (fail.<id>)
# or once (once.<id>), with a log of 30 lines so that the tail bound shows.
F=$T/flags
mkdir -p "$F"
cat >"$T/proc.sh" <<EOF
#!/bin/sh
in=\$1 out=\$2 sid=\$3
sleep 0.\${NAP:-3}
if [ -e "$F/fail.\$sid" ] || { [ -e "$F/once.\$sid" ] && mkdir "$F/tried.\$sid" 2>/dev/null; }; then
  for n in \$(seq 1 30); do echo "noise line \$n of \$sid" >&2; done
  echo "failing \$sid on purpose" >&2
  exit 3
fi
cp "\$in" "\$out"
EOF
chmod +x "$T/proc.sh"
S2=part-00002-of-00008 S5=part-00005-of-00008
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 8 --max-retries 1
        --process-cmd "$T/proc.sh {input} {output} {shard_id}")

# ---- 1. failures explained
J=$T/fail
touch "$F/fail.$S2" "$F/once.$S5"
run_expect 2 timeout 120 "$MPIRUN" -np 2 "$BIN" run "${COMMON[@]}" --job-dir "$J"
cp "$T/out" "$T/run1.out"; cp "$T/err" "$T/run1.err"
host=$(hostname)
expect_out "Failed $S2 (attempt 2 on $host): "
expect_out "  | failing $S2 on purpose"
expect_out "Retried $S5 (now done at attempt 2; attempt 1 failed on $host): "
expect_out "  | failing $S5 on purpose"
# The bound: 5 lines of the 31, not the noise before them.
[ "$(grep -c "^  | .*$S2" "$T/out")" = 5 ] || { cat "$T/out"; fail "run's end should show the last 5 lines of the log"; }
! grep -q "noise line 1 of" "$T/out" || fail "the log tail is not bounded"
log2=$(sed -n "s|^  log \(.*$S2.*/process.log\), last lines\$|\1|p" "$T/out" | head -1)
[ -f "$log2" ] || { cat "$T/out"; fail "run's end does not name the failed attempt's log ($log2)"; }
expect_err "eshard-mpi retry --job-dir $J --all-failed"
[ "$(grep -c 'the job did not complete' "$T/err")" = 1 ] || fail "the error should be printed once"

run_expect 2 "$BIN" status --job-dir "$J"
expect_out "Failed $S2 (attempt 2 on $host): "
expect_out "  log $log2, last lines"
expect_out "  | failing $S2 on purpose"
expect_out "Retried $S5 (now done at attempt 2; attempt 1 failed"
run_expect 2 "$BIN" status --job-dir "$J" --json
python3 - "$T/out" "$S2" "$S5" "$log2" <<'PY' || fail "status --json lacks the failure details (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
sh = {s["shard_id"]: s for s in d["shards"]}
f, r = sh[sys.argv[2]], sh[sys.argv[3]]
assert f["status"] == "failed" and f["attempt_number"] == 2, f
p = f["problem"]
assert p["attempt"] == 2 and p["status"] == "failed" and p["log_path"] == sys.argv[4], p
assert p["error"] == f["error"] and "exit code 3" in p["error"], p
assert p["log_tail"].endswith("failing %s on purpose" % sys.argv[2]) and p["log_tail"].count("\n") == 4, p
assert p["log_tail_cut"] is True, p
assert r["status"] == "done" and r["attempt_number"] == 2 and r["problem"]["attempt"] == 1, r
assert r["problem"]["status"] == "failed" and "failing" in r["problem"]["log_tail"], r
others = [s for s in d["shards"] if s["shard_id"] not in sys.argv[2:4]]
assert all("problem" not in s for s in others), others
PY
run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/m.jsonl"
expect_err "Cannot merge an incomplete job: pending=0 running=0 stale=0 failed=1 done=7"
expect_err "requeue them with 'eshard-mpi retry --job-dir $J --all-failed'"
[ ! -e "$T/m.jsonl" ] || fail "merge of an incomplete job wrote its output"
run_expect 2 "$BIN" verify --job-dir "$J"
expect_err "Verification stopped: not all shards are complete. 1 shard(s) failed"
expect_err "--all-failed"
pass "failures explained: run's end, status text and --json, merge and verify"
