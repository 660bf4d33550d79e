#!/bin/bash
# A --process-cmd job needs no Data-Juicer recipe: prepare and run (under mpirun -np 1) take
# the input from --dataset-path, check and print nothing of Data-Juicer, record an empty recipe
# snapshot that the reference's readers accept, status shows the processor, a worker accepts
# the job, and a re-prepare finds it unchanged. Without --dataset-path the usage error names it.
# With a recipe, a --process-cmd job prints none of the recipe's Data-Juicer warnings.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

printf '{"text":"a"}\n{"text":"b"}\n{"text":"c"}\n{"text":"d"}\n' >"$T/in.jsonl"
CMD=(--process-cmd 'cp {input} {output}')
# No word of Data-Juicer, its recipe or Ray in the last run's output.
no_dj_words() {
  if grep -iE 'data-juicer|recipe|executor|ray' "$T/out" "$T/err"; then fail "Data-Juicer words in the output of $1"; fi
}

# ---- no --dataset-path: a usage error that names it, nothing written
for sub in prepare run; do
  run_expect 2 "$BIN" "$sub" "${CMD[@]}" --job-dir "$T/nods"
  expect_err "--dataset-path"
  no_job_left "$T/nods"
done
pass "--process-cmd without --config or --dataset-path: exit 2 naming --dataset-path"

# ---- run under mpirun -np 1, no recipe
run_expect 0 "$MPIRUN" -np 1 "$BIN" run "${CMD[@]}" --dataset-path "$T/in.jsonl" --job-dir "$T/job" --num-shards 2
expect_out "PASS: 2 shards were completed by 1 node(s); merged 4 rows into $T/job/merged.jsonl"
no_dj_words run
cmp "$T/in.jsonl" "$T/job/merged.jsonl" || fail "merged output differs from the input"
pass "run --process-cmd without --config"

# The manifest: what the reference's readers check still holds (ref_jobs.py loads it; a
# reference worker hashes recipe.yaml against recipe.sha256), and nothing of a recipe is made up.
python3 - "$T/job" <<'PY'
import hashlib, json, os, sys
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
snap = open(os.path.join(job, m["recipe"]["snapshot_path"]), "rb").read()
assert snap == b"", snap
assert m["recipe"]["sha256"] == hashlib.sha256(snap).hexdigest(), m["recipe"]
assert m["recipe"]["source_path"] is None, m["recipe"]
assert m["execution"] == {"executor_type": "ray", "ray_address": "local"}, m["execution"]
assert m["media_keys"] == [] and m["index_keys"] == [] and m["warnings"] == [], m
assert m["processor"]["command"] == "cp {input} {output}", m["processor"]
PY
run_expect 0 python3 "$SRC/tests/e2e/ref_jobs.py" status "$T/job"
pass "manifest without a recipe: empty recipe.yaml and its sha256, read by the reference"

# ---- status shows the processor, not Ray
run_expect 0 "$BIN" status --job-dir "$T/job"
expect_out "Job job: processor=command (cp {input} {output}) total=2 pending=0 running=0 stale=0 done=2 failed=0"
no_dj_words status
pass "status shows the processor"

# ---- a re-prepare is the same job; prepare alone works too, and a worker accepts the job
run_expect 0 "$BIN" prepare "${CMD[@]}" --dataset-path "$T/in.jsonl" --job-dir "$T/job" --num-shards 2
expect_out "Job is already prepared and unchanged: $T/job"
run_expect 0 "$BIN" prepare "${CMD[@]}" --dataset-path "$T/in.jsonl" --job-dir "$T/job2" --num-shards 2
expect_out "Prepared 2 shards from 4 records"
no_dj_words prepare
run_expect 0 "$BIN" worker --job-dir "$T/job2"
expect_out "Finished part-00001-of-00002: done"
no_dj_words worker
pass "re-prepare unchanged; prepare and worker without a recipe"

# ---- with a recipe, a command job prints none of its Data-Juicer warnings
cat >"$T/recipe.yaml" <<YAML
dataset_path: $T/in.jsonl
ray_address: auto
process:
  - whitespace_normalization_mapper:
YAML
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" "${CMD[@]}" --job-dir "$T/job3" --num-shards 2
expect_out "Prepared 2 shards"
if grep -iE 'executor_type|registry|ray_address|data-juicer' "$T/out" "$T/err"; then
  fail "Data-Juicer warnings printed for a command job"
fi
[ "$(json_get "$T/job3/manifest.json" '["warnings"]')" = "[]" ] || fail "warnings recorded for a command job"
pass "--process-cmd with a recipe: no Data-Juicer warnings"
