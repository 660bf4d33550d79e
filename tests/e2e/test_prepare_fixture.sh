#!/usr/bin/env bash
# docs/design.md#reference-tests 1: order, global_index, media paths, the split rule, idempotency,
# and an edit that keeps size and mtime detected by the hash.
. "$(dirname "$0")/lib.sh"

# The worked example's sizes (85,116,37,76,77,37 bytes) hold for a 22-byte input folder path.
IN=$T/fixture
[ "${#IN}" = 22 ] || fail "fixture path '$IN' is not 22 bytes long"
mkdir -p "$IN/nested" "$IN/media"
b80=$(printf 'b%.0s' $(seq 80)); d40=$(printf 'd%.0s' $(seq 40))
cat >"$IN/a.jsonl" <<EOF2
{"id": 0, "text": "a", "images": ["media/a.jpg"]}
{"id": 1, "text": "$b80"}
{"id": 2, "text": "c"}
EOF2
cat >"$IN/nested/b.jsonl" <<EOF2
{"id": 3, "text": "$d40"}
{"id": 4, "text": "e", "images": ["https://example.test/e.jpg"]}
{"id": 5, "text": "f"}
EOF2
write_recipe "$T/recipe.yaml"
job=$T/jobs/job1

run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$IN" --job-dir "$job" --num-shards 3
expect_out "Prepared 3 shards from 6 records (428 normalized bytes) in $job"

in=$(cd "$IN" && pwd -P)
cat "$job"/shards/*.jsonl >"$T/all.jsonl"
cat >"$T/expected.jsonl" <<EOF2
{"id":0,"text":"a","images":["$in/media/a.jpg"],"global_index":0}
{"id":1,"text":"$b80","global_index":1}
{"id":2,"text":"c","global_index":2}
{"id":3,"text":"$d40","global_index":3}
{"id":4,"text":"e","images":["https://example.test/e.jpg"],"global_index":4}
{"id":5,"text":"f","global_index":5}
EOF2
cmp "$T/all.jsonl" "$T/expected.jsonl" || fail "normalized rows differ"
[ "$(wc -c <"$job/shards/part-00000-of-00003.jsonl")" = 201 ] || fail "shard 0 size"
[ "$(wc -c <"$job/shards/part-00001-of-00003.jsonl")" = 113 ] || fail "shard 1 size"
[ "$(wc -c <"$job/shards/part-00002-of-00003.jsonl")" = 114 ] || fail "shard 2 size"
pass "rows, media paths, global_index and 201/113/114 split"

python3 - "$job" "$IN" "$T/recipe.yaml" <<'PY'
import hashlib, json, os, sys
job, inp, recipe = sys.argv[1:]
m = json.load(open(os.path.join(job, "manifest.json")))
raw = open(os.path.join(job, "manifest.json"), "rb").read()
assert raw == (json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode(), "manifest formatting"
assert m["schema_version"] == 2
assert m["execution"] == {"executor_type": "ray", "ray_address": "local", "recipe_executor_type": "ray"}, m["execution"]
assert m["job_id"] == "job1" and m["num_shards"] == 3 and m["total_rows"] == 6 and m["total_size_bytes"] == 428
assert m["index_keys"] == ["global_index"] and m["media_keys"] == ["images", "audios", "videos"]
real = os.path.realpath(inp)
assert m["dataset_path"] == real and m["media_root"] == real
assert [f["relative_path"] for f in m["input_files"]] == ["a.jsonl", "nested/b.jsonl"]
for f in m["input_files"]:
    data = open(f["path"], "rb").read()
    assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["size_bytes"] == len(data) and f["rows"] == 3
    assert f["mtime_ns"] == os.stat(f["path"]).st_mtime_ns
allb = b"".join(open(os.path.join(job, s["path"]), "rb").read() for s in m["shards"])
assert m["normalized_sha256"] == hashlib.sha256(allb).hexdigest()
assert [s["rows"] for s in m["shards"]] == [2, 2, 2]
for i, s in enumerate(m["shards"]):
    assert s["index"] == i and s["id"] == "part-%05d-of-00003" % i and s["path"] == "shards/%s.jsonl" % s["id"]
    d = open(os.path.join(job, s["path"]), "rb").read()
    assert s["sha256"] == hashlib.sha256(d).hexdigest() and s["size_bytes"] == len(d)
assert m["recipe"]["sha256"] == hashlib.sha256(open(recipe, "rb").read()).hexdigest()
assert m["recipe"]["snapshot_path"] == "recipe.yaml" and m["recipe"]["source_path"] == os.path.realpath(recipe)
assert open(os.path.join(job, "recipe.yaml"), "rb").read() == open(recipe, "rb").read()
assert os.stat(os.path.join(job, "recipe.yaml")).st_mtime_ns == os.stat(recipe).st_mtime_ns
assert set(m["policy"]) >= {"lock_timeout_secs", "max_retries", "poll_interval_secs"}
assert (m["policy"]["lock_timeout_secs"], m["policy"]["max_retries"], m["policy"]["poll_interval_secs"]) == (126000, 3, 20)
assert isinstance(m["data_juicer"]["commit"], str) and m["data_juicer"]["commit"]
for d in ("attempts", "state/locks", "state/done", "state/failed", "state/stale_locks", "state/history/failed", "state/history/attempts"):
    assert os.path.isdir(os.path.join(job, d)), d
import re
assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00", m["created_at"])
PY
pass "manifest fields and formatting"

# Idempotent re-run: nothing written, exit 0.
before=$(stat -c %Y.%i "$job/manifest.json")
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$IN" --job-dir "$job" --num-shards 3
expect_out "Job is already prepared and unchanged: $job"
[ "$before" = "$(stat -c %Y.%i "$job/manifest.json")" ] || fail "re-run rewrote the manifest"
pass "idempotent re-run"

# Another shard count is another job.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$IN" --job-dir "$job" --num-shards 2
expect_err "Job directory already exists and does not match this request: $job was prepared with 3 shards (now 2). Choose a new --job-dir"

# Same size and mtime, other content: the hash tells.
mt=$(stat -c %y "$IN/a.jsonl")
sed -i 's/"c"/"C"/' "$IN/a.jsonl"
touch -d "$mt" "$IN/a.jsonl"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$IN" --job-dir "$job" --num-shards 3
expect_err "does not match this request: $job was prepared with input file $(realpath "$IN/a.jsonl") of sha256 "
pass "edit with the same size and mtime detected"
