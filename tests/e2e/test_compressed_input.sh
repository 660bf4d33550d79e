#!/usr/bin/env bash
# Compressed input (.jsonl.gz, .jsonl.zst): the same data, plain, gzip, zstd or mixed, in a
# folder or as one file, gives byte-identical shards and the same normalized hash; the
# manifest's fingerprints are those of the stored (compressed) bytes; a re-prepare re-hashes
# them and finds the job unchanged; a job of compressed input runs and merges under mpirun. A
# folder's compressed files are read with --compressed (test_prepare_discovery: without it).
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
# Three files in two folders, rows of varied length and content (unicode, escapes, nested
# values, an absolute media list: a relative one would resolve against each folder), about 3 MB
# in all, so the decoder crosses many reads.
python3 - "$T/plain" <<'PY'
import json, os, random, sys
root = sys.argv[1]
rnd = random.Random(12)
os.makedirs(os.path.join(root, "sub"))
for name, rows in (("a.jsonl", 4000), ("sub/b.jsonl", 9000), ("c.jsonl", 2500)):
    with open(os.path.join(root, name), "w", encoding="utf-8") as f:
        for i in range(rows):
            r = {"id": i, "text": "".join(rnd.choice("abc d\u00e9\u4e2d\"\\\t") for _ in range(rnd.randrange(1, 400))),
                 "meta": {"n": rnd.random(), "tags": [rnd.randrange(10**12)] * rnd.randrange(3)}}
            if i % 7 == 0:
                r["images"] = ["/media/x%d.jpg" % i]  # absolute: the same whatever the folder
            f.write(json.dumps(r, ensure_ascii=rnd.random() < 0.5) + "\n")
PY
mkdir -p "$T/gz/sub" "$T/zst/sub" "$T/mixed/sub"
for f in a.jsonl sub/b.jsonl c.jsonl; do
  gzip -9 -c "$T/plain/$f" >"$T/gz/$f.gz"
  zstd -q -9 -c "$T/plain/$f" >"$T/zst/$f.zst"
done
cp "$T/plain/a.jsonl" "$T/mixed/a.jsonl"
# Two gzip members, the cut inside a row: one stream.
head -c 100001 "$T/plain/sub/b.jsonl" | gzip -c >"$T/mixed/sub/b.jsonl.gz"
tail -c +100002 "$T/plain/sub/b.jsonl" | gzip -c >>"$T/mixed/sub/b.jsonl.gz"
# Upper-case suffix, several zstd frames.
split -b 70000 "$T/plain/c.jsonl" "$T/cpart."
for p in "$T"/cpart.*; do zstd -q -c "$p"; done >"$T/mixed/c.JSONL.ZST"

prep() { # NAME DATASET
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$2" --job-dir "$T/job-$1" \
    --num-shards 5 --process-cmd 'cp {input} {output}' --compressed
}
for k in plain gz zst mixed; do prep "$k" "$T/$k"; done
for k in gz zst mixed; do
  for s in "$T/job-plain/shards/"*.jsonl; do
    cmp "$s" "$T/job-$k/shards/$(basename "$s")" || fail "$k: shard $(basename "$s") differs from the plain input's"
  done
  [ "$(ls "$T/job-$k/shards" | wc -l)" = 5 ] || fail "$k: not 5 shards"
done
# Fingerprints: sha256 and size of the stored bytes, rows of the decoded lines; the same
# normalized hash and rows as the plain input.
python3 - "$T" <<'PY'
import hashlib, json, os, sys
T = sys.argv[1]
plain = json.load(open(os.path.join(T, "job-plain", "manifest.json")))
for k in ("gz", "zst", "mixed"):
    m = json.load(open(os.path.join(T, "job-" + k, "manifest.json")))
    assert m["normalized_sha256"] == plain["normalized_sha256"], k
    assert m["total_rows"] == plain["total_rows"] == 15500, (k, m["total_rows"])
    assert [s["sha256"] for s in m["shards"]] == [s["sha256"] for s in plain["shards"]], k
    rels = [f["relative_path"] for f in m["input_files"]]
    want = {"gz": ["a.jsonl.gz", "c.jsonl.gz", "sub/b.jsonl.gz"],
            "zst": ["a.jsonl.zst", "c.jsonl.zst", "sub/b.jsonl.zst"],
            "mixed": ["a.jsonl", "c.JSONL.ZST", "sub/b.jsonl.gz"]}[k]
    assert rels == want, (k, rels)
    for f, p in zip(m["input_files"], plain["input_files"]):
        data = open(f["path"], "rb").read()
        assert f["sha256"] == hashlib.sha256(data).hexdigest(), f
        assert f["size_bytes"] == len(data), f
        assert f["rows"] == p["rows"], (f, p)
    if k != "mixed":
        assert all(f["size_bytes"] < p["size_bytes"] / 2 for f, p in zip(m["input_files"], plain["input_files"])), k
PY
# A re-prepare re-hashes the stored bytes: unchanged; a recompressed file (same rows, other
# bytes) is a changed input.
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/gz" --job-dir "$T/job-gz" \
  --num-shards 5 --process-cmd 'cp {input} {output}' --compressed
expect_out "Job is already prepared and unchanged"
gzip -1 -c "$T/plain/c.jsonl" >"$T/gz/c.jsonl.gz"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/gz" --job-dir "$T/job-gz" \
  --num-shards 5 --process-cmd 'cp {input} {output}' --compressed
# A single compressed file as the dataset: the same shards as the plain file.
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/plain/sub/b.jsonl" --job-dir "$T/one-plain" --num-shards 3 --process-cmd 'cp {input} {output}'
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/zst/sub/b.jsonl.zst" --job-dir "$T/one-zst" --num-shards 3 --process-cmd 'cp {input} {output}'
for s in "$T/one-plain/shards/"*.jsonl; do cmp "$s" "$T/one-zst/shards/$(basename "$s")" || fail "single zst file: shards differ"; done
# The whole job on compressed input under mpirun -np 2: merged like the plain input's shards.
run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/mixed" \
  --job-dir "$T/run-mixed" --num-shards 4 --process-cmd 'cp {input} {output}' --compressed
cat "$T/run-mixed/shards/"*.jsonl | cmp - "$T/run-mixed/merged.jsonl" || fail "merged output differs from the shards"
run_expect 0 "$BIN" verify --job-dir "$T/run-mixed"
# Resubmitted without --compressed, the scan finds a.jsonl alone: another job, refused.
run_expect 2 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/mixed" \
  --job-dir "$T/run-mixed" --num-shards 4 --process-cmd 'cp {input} {output}'
expect_err "does not match this request"
pass "plain, gzip, zstd and mixed input: identical shards, stored-byte fingerprints, a run under mpirun -np 2"

# ---- decompression bombs (issue 35, item 6): a compressed file may decode to at most 1000
# times its stored size, checked line by line; --max-input-bytes N replaces that rule with a cap
# of N decoded bytes on all input, plain files included. Nothing is left behind a refusal.
python3 - <<'PY' | zstd -q -19 -c >"$T/bomb.jsonl.zst"
import sys
line = b'{"text": "' + b"a" * 51 + b'"}\n'  # 64 bytes
sys.stdout.buffer.write(line * (8 << 20 >> 6))  # 8 MiB of one line
PY
stored=$(stat -c %s "$T/bomb.jsonl.zst")
[ "$stored" -lt 8000 ] || fail "the bomb compressed to $stored bytes, not past 1000 times"
BOMB=(prepare --config "$T/recipe.yaml" --dataset-path "$T/bomb.jsonl.zst" --job-dir "$T/job-bomb" --num-shards 2)
run_expect 2 "$BIN" "${BOMB[@]}"
expect_err "ERROR: Compressed input decodes to more than 1000 times its size, refused as a decompression bomb: $T/bomb.jsonl.zst ($stored bytes stored, "
expect_err "; --max-input-bytes N allows N decoded bytes)"
no_job_left "$T/job-bomb"
# Allowed explicitly: read whole.
run_expect 0 "$BIN" "${BOMB[@]}" --max-input-bytes 8388608
expect_out "Prepared 2 shards from 131072 records"
# The cap counts decoded bytes of every file, plain ones too, and run takes it as well.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/plain" --job-dir "$T/job-cap" --num-shards 2 \
  --max-input-bytes 1000000
expect_err "ERROR: Input passes --max-input-bytes 1000000 decoded bytes at $T/plain/"
no_job_left "$T/job-cap"
run_expect 2 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/bomb.jsonl.zst" --job-dir "$T/job-cap" --num-shards 2 \
  --process-cmd 'cp {input} {output}' --max-input-bytes 8388607
expect_err "ERROR: Input passes --max-input-bytes 8388607 decoded bytes at $T/bomb.jsonl.zst:131072"
no_job_left "$T/job-cap"
pass "a zstd bomb ($stored bytes to 8 MiB) refused by the ratio rule, read with --max-input-bytes; the cap on plain input and in run"
