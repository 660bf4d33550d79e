#!/bin/bash
# A preemption is never a failure. A scheduler that stops a job (scancel, a container runtime)
# signals every process of it in no fixed order, so the processor often dies first. This test
# does what such a scheduler does, without one:
#   1. worker: the processor gets SIGTERM, SIGINT, SIGHUP or SIGKILL (dying of it, or exiting
#      128+N from a trap), and 0-300 ms later the worker gets SIGTERM; 20 rounds, each attempt
#      must end "preempted", with no failed marker, no lock left and no retry used;
#   2. the same under `mpirun -np 2 eshard-mpi run`, the second signal going to every rank (as
#      scancel does), to one rank only (the other stops through MPI), or to mpirun;
#   3. a rerun completes the job with the output of a plain run;
#   4. a processor killed from outside when no stop follows is a failure after the grace, and
#      its message names the signal; an ordinary failure is not delayed by the grace.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        f.write(json.dumps({"id": i, "text": "preempt row %d " % i + "p" * (i % 11)}) + "\n")
PY
F=$T/flags
mkdir -p "$F"
# The processor records its pid in $F/pid.<shard> and waits in the way $F/mode says: "exec"
# (it becomes sleep, so the signal kills the processor itself), "trap" (a shell that exits
# 128+N on signal N, as wrappers do), "fast" (copies at once), "fail3" (exits 3).
cat >"$T/proc.sh" <<EOF
#!/bin/sh
in=\$1 out=\$2 sid=\$3
mode=\$(cat "$F/mode" 2>/dev/null || echo fast)
echo \$\$ >"$F/pid.\$sid.tmp" && mv "$F/pid.\$sid.tmp" "$F/pid.\$sid"
case \$mode in
  exec) exec sleep 60 ;;
  trap) trap 'exit 143' TERM; trap 'exit 130' INT; trap 'exit 129' HUP
        sleep 60 & wait ;;
  fail3) exit 3 ;;
  selfkill) kill -TERM \$\$ ;;
esac
cp "\$in" "\$out"
EOF
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 6
        --process-cmd "$T/proc.sh {input} {output} {shard_id}")
echo fast >"$F/mode"
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"
rm -f "$F"/pid.*

# no_failure JOB WHAT: every attempt is preempted (or done), no failed marker, no lock.
no_failure() {
  python3 - "$1" <<'PY' || fail "$2"
import glob, json, os, sys
job = sys.argv[1]
st = {}
for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json")):
    a = json.load(open(p))
    st.setdefault(a.get("status"), []).append((p, a.get("error")))
bad = {k: v for k, v in st.items() if k not in ("preempted", "done")}
failed = os.listdir(os.path.join(job, "state", "failed"))
locks = os.listdir(os.path.join(job, "state", "locks"))
if bad or failed or locks:
    print("attempts:", {k: len(v) for k, v in st.items()}, "bad:", bad, file=sys.stderr)
    print("failed markers:", failed, "locks:", locks, file=sys.stderr)
    sys.exit(1)
PY
}
count_status() {
  python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
print(sum(json.load(open(p)).get("status") == sys.argv[2]
          for p in glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json"))))
PY
}
# wait_pids N: until N processors recorded their pids; prints them.
wait_pids() {
  local n=$1 i
  for i in $(seq 1 300); do
    [ "$(find "$F" -name 'pid.part-*' ! -name '*.tmp' | wc -l)" -ge "$n" ] && break
    sleep 0.02
  done
  [ "$(find "$F" -name 'pid.part-*' ! -name '*.tmp' | wc -l)" -ge "$n" ] || fail "$n processor(s) did not start within 6 s"
  cat "$F"/pid.part-*
}

# ==== 1. worker: the processor first, the worker 0-300 ms later, 20 rounds.
J=$T/job
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$J"
SIGS=(TERM INT HUP KILL)
DELAYS=(0 0.3 0.01 0.05 0.1 0.2 0.15 0.25 0.02 0.08)
rounds=20
for r in $(seq 0 $((rounds - 1))); do
  sig=${SIGS[r % 4]} delay=${DELAYS[r % 10]}
  mode=exec
  if [ $((r / 4 % 2)) = 1 ] && [ "$sig" != KILL ]; then mode=trap; fi
  echo "$mode" >"$F/mode"
  rm -f "$F"/pid.*
  "$BIN" worker --job-dir "$J" >"$T/w.$r.out" 2>"$T/w.$r.err" &
  W=$!
  P=$(wait_pids 1)
  kill -"$sig" "$P"
  sleep "$delay"
  kill -TERM "$W"
  rc=0; wait "$W" || rc=$?
  [ "$rc" = 143 ] || { cat "$T/w.$r.out" "$T/w.$r.err"; fail "round $r (SIG$sig to a '$mode' processor, worker $delay s later): worker exit $rc, expected 143"; }
  grep -q ': preempted (attempt ' "$T/w.$r.out" || { cat "$T/w.$r.out" "$T/w.$r.err"; fail "round $r (SIG$sig, $mode, $delay s): the attempt was not preempted"; }
  ! grep -q '^Claimed' <(sed -n '/: preempted (attempt /,$p' "$T/w.$r.out") || fail "round $r: the worker claimed again after a preemption"
  no_failure "$J" "round $r (SIG$sig to a '$mode' processor, worker $delay s later): a failure was recorded"
done
[ "$(count_status "$J" preempted)" = "$rounds" ] || fail "expected $rounds preempted attempts, found $(count_status "$J" preempted)"
pass "worker: $rounds rounds of a stop signal to the processor first, SIGTERM to the worker 0-300 ms later: all preempted"

# ==== 2. mpirun -np 2 run: processors first, then every rank / one rank / mpirun.
R=$T/runjob
how=(all one mpirun all one)
for r in 0 1 2 3 4; do
  echo exec >"$F/mode"
  rm -f "$F"/pid.*
  ranks_reset
  $MPIRUN -np 2 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$R" >"$T/m.$r.out" 2>"$T/m.$r.err" &
  M=$!
  PS=$(wait_pids 2)
  ranks_wait_pids 2 10
  # shellcheck disable=SC2086
  kill -TERM $PS
  sleep "${DELAYS[r]}"
  case ${how[r]} in
    all) kill -TERM "$(cat "$T/ranks/pid.0")" "$(cat "$T/ranks/pid.1")" ;;
    one) kill -TERM "$(cat "$T/ranks/pid.1")" ;;
    mpirun) kill -TERM "$M" ;;
  esac
  rc=0; wait "$M" || rc=$?
  # Hydra returns 0 in some runs after SIGTERM to the launcher itself although every rank
  # exited 143 (test_run_failures section 7, README "Exit codes"): there the ranks' own codes
  # say it; every other case must not exit 0.
  if [ "$MPI_FLAVOR/${how[r]}/$rc" = mpich/mpirun/0 ]; then
    ranks_expect 2 143
  else
    [ "$rc" != 0 ] || { cat "$T/m.$r.out"; fail "mpirun round $r: exit 0 after a stop"; }
  fi
  no_failure "$R" "mpirun round $r (processors, then SIGTERM to ${how[r]}): a failure was recorded"
  [ "$(count_status "$R" preempted)" = $((2 * (r + 1))) ] ||
    { cat "$T/m.$r.out" "$T/m.$r.err"; fail "mpirun round $r: expected $((2 * (r + 1))) preempted attempts, found $(count_status "$R" preempted)"; }
done
pass "mpirun -np 2 run: 5 rounds of processors first, then SIGTERM to every rank, one rank or mpirun: all preempted"

# ==== 3. Reruns complete both jobs with the output of a plain run.
echo fast >"$F/mode"
run_expect 0 "$BIN" worker --job-dir "$J"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/job.jsonl"
cmp "$T/ref.jsonl" "$T/job.jsonl" || fail "the worker job's output differs from a plain run"
ranks_reset
run_expect 0 $MPIRUN -np 2 "$BIN" run "${COMMON[@]}" --job-dir "$R"
expect_out "PASS: 6 shards were completed by 1 node(s); merged 60 rows"
cmp "$T/ref.jsonl" "$R/merged.jsonl" || fail "the run job's output differs from a plain run"
[ -z "$(find "$J/state/failed" "$R/state/failed" -type f)" ] || fail "failed markers after the reruns"
pass "reruns complete both jobs; outputs equal a plain run"

# ==== 4. No stop follows: a failure after the grace, named by its signal; plain failures
# are not delayed.
K=$T/kill
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$K" --max-retries 0
echo exec >"$F/mode"
rm -f "$F"/pid.*
t0=$(date +%s.%N)
"$BIN" worker --job-dir "$K" --max-shards 1 --preempt-grace-secs 1.5 >"$T/k.out" 2>"$T/k.err" &
W=$!
P=$(wait_pids 1)
kill -TERM "$P"
rc=0; wait "$W" || rc=$?
t1=$(date +%s.%N)
[ "$rc" = 2 ] || { cat "$T/k.out" "$T/k.err"; fail "an outside SIGTERM without a stop: worker exit $rc, expected 2"; }
d=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$t1")
python3 -c "import sys; sys.exit(0 if $d >= 1.5 else 1)" || fail "the worker did not wait the 1.5 s grace before counting the failure ($d s)"
# The upper bound only tells a grace from a hang (a lease is 120 s here): far from the grace.
python3 -c "import sys; sys.exit(0 if $d < 60 else 1)" || fail "the worker took $d s to count the failure after a 1.5 s grace"
S=part-00000-of-00006
err=$(json_get "$K/state/failed/$S.json" '["last_error"]')
case $err in
  "Processor killed by signal 15 (SIGTERM); not a preemption: it was killed by signal 15 (SIGTERM), which eshard-mpi did not send, but no stop reached the worker within 1.5 s") ;;
  *) fail "unexpected last_error: $err" ;;
esac
pass "an outside SIGTERM with no stop after it: failed after the grace, message '$err'"

rm -rf "$K"
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$K" --max-retries 0
echo fail3 >"$F/mode"
t0=$(date +%s.%N)
run_expect 2 "$BIN" worker --job-dir "$K" --max-shards 1 --preempt-grace-secs 60
t1=$(date +%s.%N)
# Not after the grace (60 s here); the bound leaves room for a loaded machine.
python3 -c "import sys; sys.exit(0 if float(sys.argv[2])-float(sys.argv[1]) < 30 else 1)" "$t0" "$t1" ||
  fail "an ordinary failure (exit 3) took the preemption grace"
[ "$(json_get "$K/state/failed/$S.json" '["last_error"]')" = "Processor returned exit code 3" ] || fail "exit 3 message"
pass "an ordinary failure (exit 3) is recorded at once"
