#!/usr/bin/env bash
# Input discovery (README "Compressed input"): a dataset folder's members are the reference's,
# .jsonl only, unless --compressed; with --compressed a member present both plain and compressed
# is refused; a compressed file named directly is read without the option. Each job is compared
# with the reference's (tests/e2e/ref_prepare.py: its shards and facts); a re-prepare with or
# without --compressed is the same job only when it finds the same files.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
prep() { # CODE JOB DATASET [OPTION...]
  local code=$1 job=$2 ds=$3; shift 3
  run_expect "$code" "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$ds" --job-dir "$T/$job" \
    --num-shards 2 --process-cmd 'cp {input} {output}' "$@"
}
# same_as_ref JOB DATASET: the job's shards and manifest facts are those of the reference's
# prepare of DATASET (same shard files, bytes, input files, rows and hashes).
same_as_ref() {
  rm -rf "$T/ref-$1"
  python3 "$SRC/tests/e2e/ref_prepare.py" "$2" 2 "$T/ref-$1" --index global_index
  (cd "$T/ref-$1/shards" && ls) >"$T/ref-shards"
  (cd "$T/$1/shards" && ls) | cmp - "$T/ref-shards" || fail "$1: shard names differ from the reference's"
  while read -r s; do
    cmp "$T/$1/shards/$s" "$T/ref-$1/shards/$s" || fail "$1: shard $s differs from the reference's"
  done <"$T/ref-shards"
  python3 - "$T/$1/manifest.json" "$T/ref-$1/facts.json" <<'PY' || fail "$1: manifest differs from the reference's facts"
import json, sys
m, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bad = [k for k in ref if k != "input_files" and m[k] != ref[k]]
mine = [{k: f[k] for k in ("path", "relative_path", "rows", "sha256", "size_bytes")} for f in m["input_files"]]
if mine != ref["input_files"]:
    bad.append("input_files: %s" % [f["relative_path"] for f in m["input_files"]])
if bad:
    sys.exit("differs: %s (ours %d rows, the reference %d)" % (bad, m["total_rows"], ref["total_rows"]))
PY
}

# A folder holding floats.jsonl (6 rows) and its gzip copy: by default the plain file alone,
# 6 rows as the reference, and a warning that names what was left out.
mkdir -p "$T/dup"
printf '%s\n' '{"x": 0.1}' '{"x": 1e300}' '{"x": -0.0}' '{"x": 3.14159}' '{"x": 2.5e-7}' '{"x": 1E5}' >"$T/dup/floats.jsonl"
gzip -k "$T/dup/floats.jsonl"
prep 0 job-dup "$T/dup"
expect_out "Prepared 2 shards from 6 records"
expect_err "WARNING: left out 1 compressed file under $T/dup (first: floats.jsonl.gz)"
same_as_ref job-dup "$T/dup"
pass "plain and gzip copy: the plain file alone, 6 rows, the reference's job"

# With --compressed the same folder is refused, naming both files; nothing is left.
prep 2 job-dup-c "$T/dup" --compressed
expect_err "ERROR: Input file present twice, plain and compressed: $T/dup/floats.jsonl and $T/dup/floats.jsonl.gz; remove one"
[ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "more than one line on stderr"; }
no_job_left "$T/job-dup-c"
# ... and so are two compressed copies of one file, the suffix in any case.
mkdir -p "$T/dup2/sub"
printf '{"a":1}\n' | gzip -c >"$T/dup2/sub/p.jsonl.GZ"
printf '{"a":1}\n' | zstd -q -c >"$T/dup2/sub/p.jsonl.zst"
prep 2 job-dup2 "$T/dup2" --compressed
expect_err "Input file present twice, compressed twice: $T/dup2/sub/p.jsonl.GZ and $T/dup2/sub/p.jsonl.zst"
no_job_left "$T/job-dup2"
pass "--compressed refuses a file present twice"

# A tree with a stray skip.jsonl.gz that is not gzip: prepared as the reference prepares it.
mkdir -p "$T/stray/nested"
printf '%s\n' '{"id": 0, "text": "a"}' '{"id": 1, "text": "bb"}' '{"id": 2, "text": "c"}' >"$T/stray/a.jsonl"
printf '%s\n' '{"id": 3, "text": "d"}' '{"id": 4, "text": "e"}' >"$T/stray/nested/b.jsonl"
echo 'not gzip at all' >"$T/stray/nested/skip.jsonl.gz"
prep 0 job-stray "$T/stray"
expect_out "Prepared 2 shards from 5 records"
same_as_ref job-stray "$T/stray"
# With --compressed the stray file is read, and its bytes are refused.
prep 2 job-stray-c "$T/stray" --compressed
expect_err "Corrupt gzip data (incorrect header check) in $T/stray/nested/skip.jsonl.gz after line 0"
no_job_left "$T/job-stray-c"
pass "a stray non-gzip .jsonl.gz: the reference's job by default, refused with --compressed"

# A folder of compressed files alone: the reference's error and the way out; --compressed reads
# it; a compressed file named directly is read without the option.
mkdir -p "$T/gzonly"
gzip -c "$T/stray/a.jsonl" >"$T/gzonly/a.jsonl.gz"
zstd -q -c "$T/stray/nested/b.jsonl" >"$T/gzonly/b.jsonl.zst"
prep 2 job-gzonly "$T/gzonly"
expect_err "No .jsonl files found under $T/gzonly (it holds 2 compressed files, first: a.jsonl.gz; --compressed reads them)"
no_job_left "$T/job-gzonly"
prep 0 job-gzonly "$T/gzonly" --compressed
expect_out "Prepared 2 shards from 5 records"
python3 - "$T/job-gzonly/manifest.json" <<'PY' || fail "--compressed: the manifest does not list the compressed files"
import json, sys
m = json.load(open(sys.argv[1]))
assert [f["relative_path"] for f in m["input_files"]] == ["a.jsonl.gz", "b.jsonl.zst"], m["input_files"]
PY
cat "$T/job-stray/shards/"*.jsonl | cmp - <(cat "$T/job-gzonly/shards/"*.jsonl) || fail "compressed copies: other rows"
prep 0 job-one "$T/gzonly/b.jsonl.zst"
expect_out "Prepared 2 shards from 2 records"
! grep -q "left out" "$T/err" || { cat "$T/err"; fail "a file named directly: said to be left out"; }
pass "compressed files alone: read with --compressed, or named directly"

# A re-prepare is the same job when its scan finds the same files: the plain-only tree with or
# without --compressed; a tree with compressed members is another job without the option.
prep 0 job-stray "$T/stray"
expect_out "Job is already prepared and unchanged"
mkdir -p "$T/plainonly" && cp "$T/stray/a.jsonl" "$T/plainonly/"
prep 0 job-plainonly "$T/plainonly"
prep 0 job-plainonly "$T/plainonly" --compressed
expect_out "Job is already prepared and unchanged"
mkdir -p "$T/mixed" && cp "$T/stray/a.jsonl" "$T/gzonly/b.jsonl.zst" "$T/mixed/"
prep 0 job-mixed "$T/mixed" --compressed
prep 0 job-mixed "$T/mixed" --compressed
expect_out "Job is already prepared and unchanged"
prep 2 job-mixed "$T/mixed"
expect_err "does not match this request"
pass "a re-prepare with or without --compressed: the same job only with the same files"
