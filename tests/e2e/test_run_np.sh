#!/bin/bash
# eshard-mpi run under real mpirun with 1, 2 and 4 ranks (4 oversubscribes the 2 cores), and as a
# singleton without mpirun: the merged output is byte-identical to a single-process
# prepare + worker + merge of the same input, and every rank exits with the same code.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(300):
        text = "row %d  %s\t end " % (i, "\u00e9t\u00e9 " * (i % 5)) + "x" * (i * 37 % 101)
        f.write(json.dumps({"id": i, "text": text, "n": i * 3 / 7}, ensure_ascii=(i % 2 == 0)) + "\n")
PY
# The processor reverses the rows of its shard, so a merge in the wrong order shows.
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
tac "$1" >"$2"
EOF
chmod +x "$T/proc.sh"
PROC="$T/proc.sh {input} {output}"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 7 --process-cmd "$PROC")

# ---- the reference: the single-step commands in one process
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"
[ "$(wc -l <"$T/ref.jsonl")" = 300 ] || fail "reference merge has $(wc -l <"$T/ref.jsonl") rows"
pass "single-process prepare + worker + merge"

# check_job DIR OUT RANKS: the run's output equals the reference; all shards done; rank 0 alone
# printed the summary lines.
check_job() {
  local job=$1 out=$2 n=$3
  cmp "$T/ref.jsonl" "$out" || fail "merged output of $job differs from the single-process run"
  [ "$(find "$job/state/done" -name '*.json' | wc -l)" = 7 ] || fail "$job: not 7 done records"
  [ -z "$(running_locks "$job")" ] || fail "$job: running locks left: $(running_locks "$job")"
  [ "$(fence_counts "$job" | cut -d" " -f2-)" = "0 0" ] || fail "$job: locks that are not done fences: $(fence_counts "$job")"
  [ "$(grep -c '^PASS: 7 shards were completed by 1 node(s); merged 300 rows' "$T/out")" = 1 ] ||
    { cat "$T/out"; fail "expected one PASS line"; }
  # The spread of the first claims means something only between ranks.
  local want_spread=1
  [ "$n" -gt 1 ] || want_spread=0
  [ "$(grep -c '^First claims of the ranks were [0-9.]* s apart$' "$T/out")" = "$want_spread" ] ||
    { cat "$T/out"; fail "expected $want_spread 'First claims' line(s) on $n rank(s)"; }
  [ "$(grep -c '^Worker .* started for ' "$T/out")" = "$n" ] || { cat "$T/out"; fail "expected $n workers"; }
  # Each event log belongs to one rank (one process).
  [ "$(find "$job/state/events" -name '*.jsonl' | wc -l)" = "$n" ] || fail "$job: expected $n event logs"
}

for np in 1 2 4; do
  ranks_reset
  start=$(date +%s)
  run_expect 0 timeout 100 "$MPIRUN" -np "$np" "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
    --job-dir "$T/job$np" --output "$T/out$np.jsonl"
  ranks_expect "$np" 0
  check_job "$T/job$np" "$T/out$np.jsonl" "$np"
  expect_out "on $np rank(s), 1 host(s): nodes=1 shards=7 mode=elastic cap=unlimited"
  # Every rank that ran printed its worker's end; nobody waited out a poll interval of 20 s.
  # The ranks' own span (ranks_span), without mpirun's start and end, which grow with the load.
  span=$(ranks_span)
  python3 -c "import sys; sys.exit(0 if $span < 60 else 1)" || fail "-np $np took $span s ($(($(date +%s) - start)) s in all)"
  pass "mpirun -np $np: output identical to the single-process run, every rank exited 0"
done

# ---- the same command again resumes a finished job: a no-op that passes again
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --job-dir "$T/job2" --output "$T/out2b.jsonl"
ranks_expect 2 0
cmp "$T/ref.jsonl" "$T/out2b.jsonl" || fail "rerun output differs"
[ "$(find "$T/job2/attempts" -name attempt.json | wc -l)" = 7 ] || fail "rerun of a done job made new attempts"
pass "rerun of a finished job passes without new attempts"

# ---- singleton: no mpirun, one rank
run_expect 0 timeout 100 "$BIN" run "${COMMON[@]}" --job-dir "$T/job-single" --output "$T/out-single.jsonl"
check_job "$T/job-single" "$T/out-single.jsonl" 1
expect_out "on 1 rank(s), 1 host(s)"
pass "singleton start (no mpirun) works as one rank"

# ---- the launcher of the other MPI (Open MPI's mpirun for an MPICH build, hydra for an Open MPI
# one) would start every process as a singleton, each its own rank 0 of the same job folder:
# every process refuses at once with exit 2, before anything is written.
case $MPI_FLAVOR in openmpi) other=mpiexec.mpich ;; *) other=mpirun.openmpi ;; esac
command -v "$other" >/dev/null || fail "$other is missing (scripts/install-deps.sh installs Open MPI and MPICH)"
run_expect 2 timeout 100 "$other" -n 2 "$BIN" run "${COMMON[@]}" --job-dir "$T/job-other" --output "$T/out-other.jsonl"
[ "$(grep -c "the launcher started 2 processes .* but MPI sees a world of 1: eshard-mpi is linked against" "$T/err")" = 2 ] ||
  { cat "$T/out" "$T/err"; fail "each process should refuse the other MPI's launcher"; }
no_job_left "$T/job-other"
pass "the other MPI's launcher ($other): every process exits 2 at once, no job folder"

# ---- an explicit run id reaches every done record
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --job-dir "$T/job-rid" --output "$T/out-rid.jsonl" --run-id my-run-7
ranks_expect 2 0
for f in "$T"/job-rid/state/done/*.json; do
  [ "$(json_get "$f" '["run_id"]')" = my-run-7 ] || fail "run_id of $f"
done
expect_out "eshard-mpi run my-run-7 on 2 rank(s)"
# Without --run-id: the launcher's job id (JOB_ID here), the same on every rank.
ranks_reset
run_expect 0 env JOB_ID=env-job-9 timeout 100 "$MPIRUN" $MPI_EXPORT JOB_ID -np 2 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --job-dir "$T/job-envid" --output "$T/out-envid.jsonl"
ranks_expect 2 0
for f in "$T"/job-envid/state/done/*.json; do
  [ "$(json_get "$f" '["run_id"]')" = env-job-9 ] || fail "run_id of $f"
done
pass "run id from --run-id and from the launcher's environment"

# ---- merge while working: while the last shard still runs (3 s; the others 0.4 s), rank 0 has
# appended the ones before it; the output is the same bytes as with --merge-at-end, and no
# temporary is left beside it. (With shards all alike, the last ones finished within the
# follower's poll of each other and a loaded machine merged only 3 of 7 early.)
cat >"$T/slow.sh" <<'EOF'
#!/bin/sh
case $3 in part-00006-of-00007) sleep 3 ;; *) sleep 0.4 ;; esac
tac "$1" >"$2"
EOF
chmod +x "$T/slow.sh"
SLOW=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 7 --process-cmd "$T/slow.sh {input} {output} {shard_id}")
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${SLOW[@]}" --job-dir "$T/job-follow" --output "$T/outdir/follow.jsonl"
ranks_expect 2 0
early=$(sed -n 's/^Merged 7 shards and 300 rows into .*follow.jsonl (\([0-9]*\) of them while the job ran)$/\1/p' "$T/out")
[ -n "$early" ] && [ "$early" -ge 4 ] || { cat "$T/out"; fail "merge while working: expected at least 4 of 7 shards merged before the end, got '${early}'"; }
cmp "$T/ref.jsonl" "$T/outdir/follow.jsonl" || fail "merge while working: output differs from the single-process run"
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${SLOW[@]}" --job-dir "$T/job-atend" --output "$T/outdir/atend.jsonl" --merge-at-end
ranks_expect 2 0
expect_out "Merged 7 shards and 300 rows into $T/outdir/atend.jsonl"
grep -q 'while the job ran' "$T/out" && fail "--merge-at-end merged while the job ran"
cmp "$T/outdir/follow.jsonl" "$T/outdir/atend.jsonl" || fail "merge while working and --merge-at-end give other bytes"
[ -z "$(find "$T/outdir" -name '.*.tmp')" ] || fail "merge temporaries left: $(ls -a "$T/outdir")"
pass "merge while working: $early of 7 shards merged while the job ran; same bytes as --merge-at-end"
