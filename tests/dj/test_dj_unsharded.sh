#!/usr/bin/env bash
# --allow-unsharded with real Data-Juicer and Ray: a ray_document_deduplicator recipe (not
# shard-safe; the plain document_deduplicator supports only Data-Juicer's default executor, and
# shard workers run the Ray one) is refused without the flag (exit 2, nothing prepared); with it, under mpirun -np 2,
# rank 0 runs it once over the whole dataset as one shard while rank 1 waits, both exit 0, the
# merged file holds the deduplicated rows (duplicates that a sharded run would have split over
# shards are gone), the manifest records "unsharded" with the reason, and the reference still
# reads the job folder (status complete, the same merge).
. "$(dirname "$0")/lib_dj.sh"
mkdir -p "$T/in"
# 24 rows, 8 distinct texts; every duplicate lies far from its first copy, so that any split
# into shards would keep some.
python3 - "$T/in/rows.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(24):
        f.write(json.dumps({"id": i, "text": "document number %d with some words" % (i % 8)}) + "\n")
PY
cat >"$T/recipe.yaml" <<'YAML'
executor_type: ray
process:
  - ray_document_deduplicator:
      lowercase: false
      ignore_non_character: false
YAML
cd "$T"
run_expect 2 "$BIN" prepare --config recipe.yaml --dataset-path in --job-dir "$T/refused" --python "$PY" --dj-process "$DJ"
expect_err "Operator 'ray_document_deduplicator' requires or may require whole-dataset semantics and cannot run shard by shard"
[ ! -e "$T/refused" ] || fail "a refused recipe left a job folder"
run_expect 2 "$BIN" prepare --config recipe.yaml --dataset-path in --job-dir "$T/refused" --num-shards 3 --allow-unsharded \
  --python "$PY" --dj-process "$DJ"
expect_err "--num-shards 3: the recipe is not shard-safe"
[ ! -e "$T/refused" ] || fail "a refused request left a job folder"

run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config recipe.yaml --dataset-path in --job-dir "$T/job" \
  --allow-unsharded --python "$PY" --dj-process "$DJ"
expect_out "rank 0 runs it once, unsharded; the other 1 rank(s) wait"
python3 - "$T/job" "$T/out" <<'PY'
import json, os, sys
job, out = sys.argv[1], open(sys.argv[2]).read()
m = json.load(open(os.path.join(job, "manifest.json")))
assert m["num_shards"] == 1 and len(m["shards"]) == 1 and m["shards"][0]["rows"] == 24, m["shards"]
assert m["unsharded"]["reasons"] == ["Operator 'ray_document_deduplicator' requires or may require whole-dataset "
                                     "semantics and cannot run shard by shard"], m["unsharded"]
assert any("runs once, unsharded" in w for w in m["warnings"]), m["warnings"]
rows = [json.loads(l) for l in open(os.path.join(job, "merged.jsonl"))]
ids = [r["id"] for r in rows]
# Every text once (which copy Ray's dedup actor keeps is its own), in input order.
assert sorted(r["text"] for r in rows) == sorted("document number %d with some words" % i for i in range(8)), rows
assert ids == sorted(ids), ids
# One worker ran it once: rank 0's (the waiting rank started none; run prints Claimed lines only with --verbose).
assert out.count("Finished part-00000-of-00001: done") == 1 and out.count("Worker ") == 1, out
print("unsharded: 24 rows -> %d deduplicated rows, in input order" % len(rows))
PY
# The reference reads the folder: complete, and its merge gives the same bytes.
python3 "$SRC/tests/e2e/ref_jobs.py" status "$T/job" >"$T/ref-status.json" || fail "the reference does not see the job complete"
python3 "$SRC/tests/e2e/ref_jobs.py" merge "$T/job" "$T/ref-merged.jsonl" >/dev/null || fail "the reference cannot merge the job"
cmp "$T/ref-merged.jsonl" "$T/job/merged.jsonl" || fail "the reference's merge differs"
[ -z "$(ray_procs)" ] || fail "Ray processes left: $(ray_procs)"
pass "not shard-safe: refused without --allow-unsharded, run once on rank 0 with it (-np 2), recorded, read by the reference"
