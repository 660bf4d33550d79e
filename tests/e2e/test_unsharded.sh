#!/usr/bin/env bash
# --allow-unsharded without Data-Juicer (a deduplicating --process-cmd stands in for it): a
# recipe that is not shard-safe is refused without the flag; with it the job is one shard, the
# manifest records why, and under mpirun -np 2 rank 0 runs it while rank 1 waits; a failure on
# rank 0 is every rank's exit code; SIGTERM to the waiting rank stops rank 0's attempt too, and
# the same command then resumes the job.
. "$(dirname "$0")/lib.sh"

python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(30):
        f.write(json.dumps({"id": i, "text": "text %d" % (i % 7)}) + "\n")
PY
printf 'executor_type: ray\nexport_shard_size: 1048576\nprocess:\n  - document_deduplicator:\n' >"$T/recipe.yaml"
cat >"$T/dedup.py" <<'PY'
import json, os, sys, time
time.sleep(float(os.environ.get("DEDUP_SLEEP", "0")))
seen = set()
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r["text"] not in seen:
            seen.add(r["text"])
            out.write(line)
PY
CMD="python3 $T/dedup.py {input} {output}"

run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/no" --process-cmd "$CMD"
expect_err "Operator 'document_deduplicator' requires or may require whole-dataset semantics and cannot run shard by shard"
# It says what to do instead: the option, and Data-Juicer's Ray deduplicators.
expect_err "cannot run shard by shard: pass --allow-unsharded to run the whole dataset as one shard on one rank"
expect_err "(ray_document_deduplicator, ray_bts_minhash_deduplicator, ray_image_deduplicator, ray_video_deduplicator)"
no_job_left "$T/no"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/no" --process-cmd "$CMD" \
  --allow-unsharded --num-shards 2
expect_err "--num-shards 2: the recipe is not shard-safe (Operator 'document_deduplicator'"
no_job_left "$T/no"
printf 'export_type: csv\nprocess:\n  - document_deduplicator:\n' >"$T/csv.yaml"
run_expect 2 "$BIN" prepare --config "$T/csv.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/no" --process-cmd "$CMD" --allow-unsharded
expect_err "Recipe option export_type='csv' cannot work per shard"
no_job_left "$T/no"

# prepare alone: one shard, the reasons recorded; a second prepare is a no-op.
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/p" --process-cmd "$CMD" \
  --allow-unsharded --nodes 4
expect_err "recipe is not shard-safe and runs once, unsharded, on one rank (--allow-unsharded): Operator 'document_deduplicator'"
python3 - "$T/p/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["num_shards"] == 1 and m["shards"][0]["rows"] == 30, m["num_shards"]
r = m["unsharded"]["reasons"]
assert len(r) == 2 and r[0].startswith("Operator 'document_deduplicator'") and r[1].startswith("Recipe option export_shard_size=1048576"), r
PY
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/p" --process-cmd "$CMD" --allow-unsharded
expect_out "Job is already prepared and unchanged"
run_expect 1 "$BIN" status --job-dir "$T/p"
expect_out "Unsharded: the recipe is not shard-safe; one shard, the whole dataset, runs once"
run_expect 1 "$BIN" status --job-dir "$T/p" --json
[ "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["unsharded"])' <"$T/out")" = True ] || fail "status --json lacks unsharded"

# run -np 2: rank 0 alone works; both exit 0; the rows are deduplicated.
run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$T/j" --process-cmd "$CMD" --allow-unsharded
expect_out "rank 0 runs it once, unsharded; the other 1 rank(s) wait"
[ "$(grep -c '^Worker ' "$T/out")" = 1 ] || { cat "$T/out"; fail "not exactly one worker ran"; }
python3 - "$T/j/merged.jsonl" <<'PY'
import json, sys
assert [json.loads(l)["id"] for l in open(sys.argv[1])] == list(range(7))
PY

# A processor that fails: every rank exits 2.
run_expect 2 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$T/f" --process-cmd "false {input} {output}" --allow-unsharded --max-retries 0
grep -q "Exit code:    2" "$T/err" || { cat "$T/err"; fail "the ranks did not exit 2"; }

# SIGTERM to the waiting rank: rank 0's attempt stops at once, every rank exits 143; then the
# same command resumes and completes.
( DEDUP_SLEEP=60 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
    --job-dir "$T/s" --process-cmd "$CMD" --allow-unsharded >"$T/s.out" 2>"$T/s.err"; echo $? >"$T/s.rc" ) &
waiter=""
for _ in $(seq 200); do
  if [ -n "$(ls "$T/s/attempts/part-00000-of-00001" 2>/dev/null)" ]; then
    for p in $(pgrep -f -- "--job-dir $T/s " || true); do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then waiter=$p; fi
    done
  fi
  [ -n "$waiter" ] && break
  sleep 0.1
done
[ -n "$waiter" ] || fail "no waiting rank 1 found"
start=$(date +%s)
kill -TERM "$waiter"
wait
[ $(( $(date +%s) - start )) -lt 30 ] || fail "rank 0 did not stop within 30 s of SIGTERM to the waiting rank"
grep -q "Exit code:    143" "$T/s.err" || { cat "$T/s.out" "$T/s.err"; fail "the ranks did not exit 143"; }
run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$T/s" --process-cmd "$CMD" --allow-unsharded
cmp "$T/s/merged.jsonl" "$T/j/merged.jsonl" || fail "the resumed job's output differs"
pass "not shard-safe: refused, or one shard on rank 0 with --allow-unsharded (recorded, exit codes, stop from the waiting rank)"
