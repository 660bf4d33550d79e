#!/bin/bash
# What a new user meets in the first hour (issue 32, "Messages and output"): each Finished line
# of a failed attempt says why and whether it is retried; the job's defaults and messages lead
# somewhere (merge/report default --output, retry of a done shard refused, "Prepared 1 shard",
# --job-dir's help, a processor program that does not exist refused at prepare).
. "$(dirname "$0")/lib.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
for i in $(seq 0 11); do echo "{\"id\": $i, \"text\": \"row $i\"}"; done >"$T/in.jsonl"
cat >"$T/fail.sh" <<'SH'
#!/bin/sh
echo "loading the model" >&2
echo "ValueError: field 'text' is empty in row 7" >&2
echo "cleaning up" >&2
exit 3
SH
chmod +x "$T/fail.sh"

# ---- a failing processor: one Finished line per attempt, each with its reason and what next.
J=$T/fails
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" \
  --num-shards 1 --max-retries 1 --process-cmd "$T/fail.sh {input} {output}"
expect_out "Prepared 1 shard from 12 records"
S=part-00000-of-00001
run_expect 2 "$BIN" worker --job-dir "$J"
[ "$(grep -c "^Finished $S: failed" "$T/out")" = 2 ] || { cat "$T/out"; fail "expected two Finished lines (two attempts)"; }
grep -q "^Finished $S: failed (attempt 1, [0-9.]* s): Processor returned exit code 3; log: ValueError: field 'text' is empty in row 7; will be retried (retry 1 of 1)$" "$T/out" ||
  { cat "$T/out"; fail "attempt 1's Finished line lacks its reason or its retry"; }
grep -q "^Finished $S: failed (attempt 2, [0-9.]* s): Processor returned exit code 3; log: ValueError: field 'text' is empty in row 7; no retries left (2 failed attempt(s), --max-retries 1): the shard is failed$" "$T/out" ||
  { cat "$T/out"; fail "attempt 2's Finished line does not say the shard is failed"; }
pass "Finished lines of failed attempts"

# ---- retry --shard-id of a done shard is refused, as its help says.
D=$T/good
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$D" \
  --num-shards 2 --process-cmd "cp {input} {output}"
expect_out "Prepared 2 shards from 12 records"
run_expect 0 "$BIN" worker --job-dir "$D"
run_expect 2 "$BIN" retry --job-dir "$D" --shard-id part-00000-of-00002
expect_err "Cannot retry part-00000-of-00002: it is already complete"
pass "retry of a done shard refused"

# ---- merge and report default --output like run and verify.
run_expect 0 "$BIN" merge --job-dir "$D"
expect_out "into $D/merged.jsonl"
cmp "$D/merged.jsonl" <(cat "$D"/shards/*.jsonl) || fail "default merge output differs"
run_expect 0 "$BIN" report --job-dir "$D"
expect_out "Wrote $D/report.html"
[ -s "$D/report.html" ] || fail "no default report"
run_expect 0 "$BIN" merge --help
expect_out "default <job-dir>/merged.jsonl"
run_expect 0 "$BIN" report --help
expect_out "default <job-dir>/report.html"
pass "merge and report default --output"

# ---- --job-dir's help says that a rerun resumes.
for cmd in prepare run; do
  run_expect 0 "$BIN" "$cmd" --help
  expect_out "this very job's folder is resumed"
done
pass "--job-dir help"

# ---- a processor program that does not exist: refused at prepare, and at a worker's start.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/nope" \
  --process-cmd "$T/no-such-prog {input} {output}"
expect_err "--process-cmd: program '$T/no-such-prog' does not exist"
no_job_left "$T/nope"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/nope" \
  --process-cmd "no-such-prog-xyz {input} {output}"
expect_err "--process-cmd: program 'no-such-prog-xyz' was not found on PATH"
no_job_left "$T/nope"
cp "$T/fail.sh" "$T/vanishing.sh"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/gone" \
  --num-shards 1 --process-cmd "$T/vanishing.sh {input} {output}"
rm "$T/vanishing.sh"
run_expect 2 "$BIN" worker --job-dir "$T/gone"
expect_err "--process-cmd: program '$T/vanishing.sh' does not exist on $(hostname)"
[ -z "$(ls -A "$T/gone/attempts" 2>/dev/null)" ] || fail "a worker without the program claimed a shard"
pass "missing processor program"
