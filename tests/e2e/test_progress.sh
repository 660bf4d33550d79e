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

# ---- 3. honest rates: a terminal job with a failure has no ETA, in text, JSON and metrics
run_expect 2 "$BIN" status --job-dir "$J"
grep -q "^Progress: 7/8 shards done, [0-9]*/240 rows ([0-9.]*%), [0-9.]* rows/s, finished with failures$" "$T/out" ||
  { cat "$T/out"; fail "status of a terminal job shows an ETA or no rate"; }
run_expect 2 "$BIN" status --job-dir "$J" --json
[ "$(json_get "$T/out" '["progress"]["eta_secs"]')" = None ] || fail "status --json gives an ETA for a terminal job"
ROWS_DONE=$(json_get "$T/out" '["progress"]["rows_done"]')
RESULT_ROWS=$(json_get "$T/out" '["progress"]["result_rows_done"]')
JOB_ID=$(json_get "$T/out" '["job_id"]')
pass "a job that finished with a failure: a rate over work time, no ETA"

# ---- 4. status --prometheus of the real job, parsed
run_expect 0 "$BIN" status --job-dir "$J" --prometheus
python3 - "$T/out" "$host" "$ROWS_DONE" "$RESULT_ROWS" "$JOB_ID" <<'PY' || { cat "$T/out"; fail "status --prometheus is not what the job says (see above)"; }
import re, sys
text = open(sys.argv[1]).read()
samples, types, helps = {}, {}, set()
line_re = re.compile(r'^([a-z_]+)\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.e+]+)$')
for line in text.splitlines():
    if line.startswith("# HELP "):
        helps.add(line.split()[2]); continue
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(); types[name] = kind; continue
    m = line_re.match(line)
    assert m, "not exposition format: %r" % line
    labels = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2)))
    assert labels.pop("job") == sys.argv[5], labels
    samples[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
for name in {k[0] for k in samples}:
    assert name in helps and types.get(name) == "gauge", name
def get(name, **kv):
    return samples[(name, tuple(sorted(kv.items())))]
want = {"pending": 0, "running": 0, "stale": 0, "done": 7, "failed": 1}
for state, n in want.items():
    assert get("eshard_shards", state=state) == n, state
assert get("eshard_rows_done") == int(sys.argv[3]) and 0 < int(sys.argv[3]) < 240 and get("eshard_rows_total") == 240
assert get("eshard_result_rows_done") == int(sys.argv[4])
assert 0 < get("eshard_bytes_done") < get("eshard_bytes_total")
assert get("eshard_attempts", outcome="done") == 7 and get("eshard_attempts", outcome="failed") == 3
assert get("eshard_host_shards_done", host=sys.argv[2]) == 7
assert get("eshard_job_terminal") == 1 and get("eshard_job_complete") == 0
assert get("eshard_work_seconds") > 0 and get("eshard_rows_per_second") > 0
assert not any(k[0] == "eshard_eta_seconds" for k in samples), "an ETA for a terminal job"
PY
run_expect 2 "$BIN" status --job-dir "$J" --prometheus --json
expect_err "--json and --prometheus are two formats"
run_expect 2 "$BIN" status --job-dir "$J" --count 2
expect_err "--count needs --watch"
pass "status --prometheus of a real job: every family with HELP and TYPE, the job's figures"

# ---- 5. a job seen while it runs: status --watch (not a TTY) with --count, then until the end
J2=$T/live
rm -rf "$F"; mkdir -p "$F"
# The input is a folder that also holds a stray compressed copy, so that rank 0 has a warning to
# print (left out without --compressed): its stderr line's prefix is checked in section 6. A
# command job prints no other warning.
mkdir -p "$T/livein" && cp "$T/in.jsonl" "$T/livein/in.jsonl" && gzip -c "$T/in.jsonl" >"$T/livein/old.jsonl.gz"
NAP=9 timeout 120 "$MPIRUN" -np 2 "$BIN" run "${COMMON[@]/#$T\/in.jsonl/$T/livein}" --job-dir "$J2" --progress-secs 1 \
  >"$T/live.out" 2>"$T/live.err" &
mpi=$!
wait_for 30 test -e "$J2/manifest.json"
has_lock() { [ -n "$(ls "$J2/state/locks" 2>/dev/null)" ]; }
wait_for 30 has_lock
run_expect 1 timeout 30 "$BIN" status --job-dir "$J2" --watch --interval 0.3 --count 2
[ "$(grep -c '^--- ' "$T/out")" = 2 ] || { cat "$T/out"; fail "--watch --count 2 did not show 2 snapshots"; }
[ "$(grep -c '^Job ' "$T/out")" = 2 ] || fail "a --watch snapshot is not a whole status"
! grep -q $'\033' "$T/out" || fail "--watch redraws although stdout is not a terminal"
run_expect 0 timeout 60 "$BIN" status --job-dir "$J2" --watch --interval 0.5
grep -q ', complete$' "$T/out" || { cat "$T/out"; fail "--watch did not end on the complete job"; }
[ "$(grep -c '^--- ' "$T/out")" -ge 2 ] || fail "--watch showed one snapshot of a running job"
[ "$(grep -c ', complete$' "$T/out")" = 1 ] || fail "--watch went on after the job completed"
got=0; wait "$mpi" || got=$?
[ "$got" = 0 ] || { cat "$T/live.out" "$T/live.err"; fail "the live job exited $got"; }
pass "status --watch: --count snapshots, then plain snapshots until the job completed"

# ---- 6. the live job's own output: progress lines from rank 0, one line per finished shard,
# the end lines once, the summary
O=$T/live.out
grep -E '^Progress: [0-9]+/8 shards done, rows [0-9]+/240 \([0-9]+ kept\), [0-9.]+ rows/s, [0-9.]+ MB/s, ETA [0-9.hms]+, running [0-9]+, stale 0, failed 0, retries 0, slowest part-0000[0-7]-of-00008 on [^ ]+ [0-9.]+s$' "$O" >"$T/progress.txt" ||
  { cat "$O"; fail "no progress line with a rate, an ETA and the slowest running shard"; }
# A line shows the slowest shard only when the view has read a running attempt's attempt.json,
# written a moment after its lock: under load a line can fall between the two, or between a
# shard's end and the next claim (once in a sanitizer run beside two other tests, 1 of 4 lines
# showed it). The period is checked on every progress line before the end.
[ "$(grep -c '^Progress: [0-7]/8 shards done' "$O")" -ge 2 ] ||
  { cat "$O"; fail "--progress-secs 1 printed fewer than 2 lines before the end of a 4 s job"; }
! grep -q $'\033\|\r' "$O" || fail "progress lines are redrawn although the ranks run under mpirun"
! grep -q '^Claimed ' "$O" || fail "Claimed lines without --verbose"
[ "$(grep -c '^Finished part-0000[0-7]-of-00008: done (attempt 1, [0-9.]* s, [0-9]* rows)$' "$O")" = 8 ] ||
  { cat "$O"; fail "expected one Finished line with duration and rows per shard"; }
[ "$(grep -c '^All 8 shards completed$' "$O")" = 1 ] || fail "'All 8 shards completed' should be printed once (rank 0)"
[ "$(grep -c '^No shard claim available' "$O")" -le 2 ] || fail "an idle rank said it waits more than once"
grep -q '^Summary: 8/8 shards done (0 failed), rows in 240, rows out 240, wall time [0-9.hms]*, work time [0-9.hms]*, 8 attempt(s)$' "$O" ||
  { cat "$O"; fail "no end summary"; }
grep -qE "^  $host +2 +8 +8 +[0-9.]+ +[0-9]+$" "$O" || { cat "$O"; fail "no per-host row (2 workers, 8 shards, 8 attempts, rows/s, busy %)"; }
grep -q '^Slowest shards (median [0-9.]*s):$' "$O" || fail "no slowest shards"
! grep -q '^  part-.*: done owner=' "$O" || fail "run's end prints a line per shard"
grep -q '^\[+[0-9.]*s\] \[rank 0 [^ ]*\] WARNING: left out 1 compressed file' "$T/live.err" || { cat "$T/live.err"; fail "stderr lines of run have no elapsed-time prefix"; }
! grep -qv '^\[+[0-9.]*s\] \[rank [01] ' "$T/live.err" || { cat "$T/live.err"; fail "a stderr line of run without its elapsed-time and rank prefix"; }
# --progress-secs 0: none; --verbose: the Claimed lines.
run_expect 0 timeout 120 "$MPIRUN" -np 2 "$BIN" run "${COMMON[@]}" --job-dir "$T/quiet" --progress-secs 0 --verbose
! grep -q '^Progress: ' "$T/out" || fail "--progress-secs 0 printed progress"
[ "$(grep -c '^Claimed part-' "$T/out")" = 8 ] || fail "--verbose did not print the Claimed lines"
pass "run: progress lines on rank 0, a line per finished shard, the end once, the summary with the per-host table"

# ---- 7. honest rates after a resume: 3 shards, a 5 s pause, the other 5 shards; the rate
# counts work time only, so it is what the shards took, not what the calendar says. worker
# prints progress lines too.
J3=$T/resume
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$J3"
run_expect 0 env NAP=5 "$BIN" worker --job-dir "$J3" --max-shards 3 --progress-secs 1
sleep 5
run_expect 0 env NAP=5 "$BIN" worker --job-dir "$J3" --progress-secs 1
grep -q '^Progress: [0-9]/8 shards done, rows ' "$T/out" || { cat "$T/out"; fail "worker printed no progress line"; }
run_expect 0 "$BIN" status --job-dir "$J3" --prometheus
python3 - "$T/out" "$J3" <<'PY' || fail "the rate after a resume counts the downtime (see above)"
import glob, json, re, sys
m = dict(re.findall(r'^(eshard_[a-z_]+)\{job="[^"]*"\} ([0-9.e+-]+)$', open(sys.argv[1]).read(), re.M))
work, rate, rows = float(m["eshard_work_seconds"]), float(m["eshard_rows_per_second"]), float(m["eshard_rows_done"])
times = [json.loads(l)["time"] for p in glob.glob(sys.argv[2] + "/state/events/*.jsonl") for l in open(p)]
span = max(times) - min(times)
print("work %.2f s, calendar %.2f s, rate %.1f rows/s" % (work, span, rate), file=sys.stderr)
assert span - work > 4, (work, span)          # the 5 s pause is not work
assert abs(rate - rows / work) < 0.01 * rate, (rate, rows, work)
PY
pass "a resumed job: work time excludes the pause, the rate is rows per second of work; worker prints progress"

# ---- 8. on a terminal (script(1) gives the worker a pseudo-terminal): one line redrawn in
# place (carriage return, erase to the end of the line), no newline-terminated progress lines
J4=$T/tty
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$J4"
command -v script >/dev/null || fail "script (util-linux) is missing"
NAP=7 timeout 60 script -qefc "$BIN worker --job-dir $J4 --progress-secs 5" "$T/tty.log" >/dev/null </dev/null ||
  { cat "$T/tty.log"; fail "the worker on a terminal failed"; }
python3 - "$T/tty.log" <<'PY' || fail "the progress line on a terminal is not redrawn in place (see above)"
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
draws = t.count("\rProgress: ")
assert draws >= 2, "drawn %d times: %r" % (draws, t[-2000:])
assert "\r\x1b[K" in t, "never erased"
# Never a progress line of its own: a redraw is followed by the erase, not by a newline.
for chunk in t.split("\rProgress: ")[1:]:
    line = chunk.split("\r", 1)[0]
    assert "\n" not in line, "a progress line ended with a newline: %r" % line
assert "All 8 shards completed" in t
PY
pass "on a terminal the progress line is redrawn in place"
