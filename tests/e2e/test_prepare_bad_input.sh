#!/usr/bin/env bash
# Every bad input of the prepare issue: exit 2, one clear message, no job or stage folder left.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
n=0
# refused NAME EXPECTED-MESSAGE [ARGS]: prepare over $T/in-NAME/x.jsonl (already written) must fail.
refused() {
  local name=$1 msg=$2; shift 2
  local job=$T/jobs/$name
  run_expect 2 "$BIN" prepare --config "${RECIPE:-$T/recipe.yaml}" --dataset-path "${DS:-$T/in-$name}" --job-dir "$job" --num-shards "${SHARDS:-1}" "$@"
  expect_err "$msg"
  [ "$(wc -l <"$T/err")" -le 3 ] || { cat "$T/err"; fail "$name: more than a few stderr lines"; }
  no_job_left "$job"
  n=$((n + 1))
}
input() { mkdir -p "$T/in-$1"; printf "$2" >"$T/in-$1/x.jsonl"; }

input blank '{"a":1}\n\n{"a":2}\n';             refused blank "Blank JSONL record at $T/in-blank/x.jsonl:2"
input spaces '{"a":1}\n \t\v\f\r\n';             refused spaces "Blank JSONL record at $T/in-spaces/x.jsonl:2"
input bom '\xef\xbb\xbf{"a":1}\n';               refused bom "BOM"
input badutf8 '{"a":"\xff"}\n';                  refused badutf8 "Invalid UTF-8 at $T/in-badutf8/x.jsonl:1"
input overlong '{"a":"\xc0\xaf"}\n';             refused overlong "Invalid UTF-8 at $T/in-overlong/x.jsonl:1"
input encsurr '{"a":"\xed\xa0\x80"}\n';          refused encsurr "Invalid UTF-8 at $T/in-encsurr/x.jsonl:1"
input notobj '{"a":1}\n[1,2]\n';                 refused notobj "JSONL record must be an object at $T/in-notobj/x.jsonl:2"
input trailing '{"a":1} x\n';                    refused trailing "Invalid JSON at $T/in-trailing/x.jsonl:1"
input ctrl '{"a":"x\x01y"}\n';                   refused ctrl "Invalid JSON at $T/in-ctrl/x.jsonl:1"
input lone '{"a":"\\ud800"}\n';                refused lone "surrogate"
input medianotlist '{"images":"a.jpg"}\n';       refused medianotlist "Media field 'images' must be a list or null at $T/in-medianotlist/x.jsonl:1"
input medianonstr '{"images":["a.jpg",3]}\n';    refused medianonstr "Every item in media field 'images' must be a string"
input zero '{"a":1}\n{"a":2}\n';                 SHARDS=0 refused zero "--num-shards"
input toomany '{"a":1}\n{"a":2}\n';              SHARDS=3 refused toomany "--num-shards (3) exceeds input records (2)"
input norows '';                                 refused norows "Input dataset contains no records"
DS=$T/does-not-exist                             refused missing "does not exist"
mkdir -p "$T/in-nojsonl"; echo '{}' >"$T/in-nojsonl/x.json"; echo '{}' >"$T/in-nojsonl/y.jsonl.bz2"
DS=$T/in-nojsonl                                 refused nojsonl "No .jsonl files found under $T/in-nojsonl"
# Compressed input (a folder's compressed files are read with --compressed): a bad line names
# the file and its decoded line; corrupt, truncated or mislabelled data names the file.
mkdir -p "$T/in-gzline" && printf '{"a":1}\n{"a":2}\n{"a":\n' | gzip -c >"$T/in-gzline/x.jsonl.gz"
DS=$T/in-gzline                                  refused gzline "Invalid JSON at $T/in-gzline/x.jsonl.gz:3" --compressed
mkdir -p "$T/in-zstline" && printf '{"a":1}\n\n' | zstd -q -c >"$T/in-zstline/x.jsonl.zst"
DS=$T/in-zstline                                 refused zstline "Blank JSONL record at $T/in-zstline/x.jsonl.zst:2" --compressed
mkdir -p "$T/in-gzbad" && seq 1 5000 | sed 's/.*/{"a":&}/' | gzip -c >"$T/gz" && head -c 3000 "$T/gz" >"$T/in-gzbad/x.jsonl.gz"
DS=$T/in-gzbad                                   refused gztrunc "Corrupt gzip data (truncated) in $T/in-gzbad/x.jsonl.gz after line" --compressed
echo '{"a":1}' >"$T/in-gzbad/x.jsonl.gz"
DS=$T/in-gzbad                                   refused gzplain "Corrupt gzip data (incorrect header check) in $T/in-gzbad/x.jsonl.gz after line 0" --compressed
mkdir -p "$T/in-zstbad" && echo '{"a":1}' >"$T/in-zstbad/x.jsonl.zst"
DS=$T/in-zstbad                                  refused zstplain "Corrupt zstd data (Unknown frame descriptor) in $T/in-zstbad/x.jsonl.zst after line 0" --compressed
: >"$T/in-zstbad/x.jsonl.zst"
DS=$T/in-zstbad                                  refused zstempty "Corrupt zstd data (empty file) in $T/in-zstbad/x.jsonl.zst" --compressed
DS=$T/in-zstbad/x.jsonl.zst                      refused zstnamed "Corrupt zstd data (empty file) in $T/in-zstbad/x.jsonl.zst"
input longline '{"a":"0123456789012345678901234567890123456789"}\n'
refused longline "longer than" --max-line-bytes 16

# Recipes.
input ok '{"a":1}\n{"a":2}\n'
printf -- '- a\n- b\n' >"$T/list.yaml";                         RECIPE=$T/list.yaml DS=$T/in-ok refused recipelist "must be a YAML mapping"
printf 'process: [\n' >"$T/broken.yaml";                        RECIPE=$T/broken.yaml DS=$T/in-ok refused recipeyaml "Invalid YAML"
python3 - "$T/bomb.yaml" <<'PY'
import sys
lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
for i in range(1, 12):
    lines.append('a%d: &a%d [%s]' % (i, i, ",".join(["*a%d" % (i - 1)] * 9)))
lines.append("process: *a11")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
start=$(date +%s%N)
RECIPE=$T/bomb.yaml DS=$T/in-ok refused bomb "alias"
# Refused, not expanded: 9^11 nodes would take hours (or all memory); a minute leaves room for
# a loaded machine.
[ $(( ($(date +%s%N) - start) / 1000000 )) -lt 60000 ] || fail "alias bomb took over 60 s"
printf 'process:\n  - no_such_operator_xyz:\n' >"$T/unknown.yaml";  RECIPE=$T/unknown.yaml DS=$T/in-ok refused unknownop "Unknown operator 'no_such_operator_xyz'"
printf 'process:\n  - document_deduplicator:\n' >"$T/dedup.yaml"; RECIPE=$T/dedup.yaml DS=$T/in-ok refused wholeop "Operator 'document_deduplicator' requires or may require whole-dataset semantics"
printf 'process:\n  - text_length_filter:\n      stats_export_path: /tmp/x\n' >"$T/stats.yaml"; RECIPE=$T/stats.yaml DS=$T/in-ok refused statsexport "stats_export_path"
# Settings that cannot work per shard: named with their value.
for opt in "export_type: parquet|export_type='parquet'" "export_shard_size: 268435456|export_shard_size=268435456" \
           "export_in_parallel: true|export_in_parallel=True" "encrypt_before_export: true|encrypt_before_export=True" \
           "generated_dataset_config: {type: EmptyFormatter, length: 5}|generated_dataset_config="; do
  key=${opt%%:*}
  printf '%s\nprocess:\n  - whitespace_normalization_mapper:\n' "${opt%%|*}" >"$T/$key.yaml"
  RECIPE=$T/$key.yaml DS=$T/in-ok refused "$key" "Recipe option ${opt#*|}"
  expect_err "cannot work per shard"
done

# An unreadable file (as an unprivileged user: root reads everything).
mkdir -p "$T/in-unreadable" && chmod 755 "$T" "$T/in-unreadable" && mkdir -p "$T/jobs" && chmod 777 "$T/jobs"
echo '{"a":1}' >"$T/in-unreadable/x.jsonl"; chmod 000 "$T/in-unreadable/x.jsonl"; chmod 644 "$T/recipe.yaml"
job=$T/jobs/unreadable
run_expect 2 setpriv --reuid=nobody --regid=nogroup --clear-groups "$BIN" prepare --config "$T/recipe.yaml" \
  --dataset-path "$T/in-unreadable" --job-dir "$job" --num-shards 1
expect_err "cannot open input file '$T/in-unreadable/x.jsonl'"
no_job_left "$job"; n=$((n + 1))

# The input changes between the two passes (a test hook appends a row after pass 1).
input changed '{"a":1}\n{"a":2}\n'
need_test_hooks
ESHARD_TEST_HOOK_AFTER_SCAN="printf '{\"a\":3}\\n' >>$T/in-changed/x.jsonl" refused changed "Input changed between the scan and write passes"

# Usage errors.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --job-dir "$T/jobs/u1" --num-shards x; expect_err "--num-shards must be a positive integer or 'auto', got 'x'"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --job-dir "$T/jobs/u1" --num-shards -3; expect_err "positive integer or 'auto'"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --job-dir "$T/jobs/u1" --num-shards 3 --target-shard-mb 8; expect_err "--target-shard-mb goes with --num-shards auto"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in-ok" --job-dir "$T/jobs/u1" --num-shards 3 --nodes 2; expect_err "--nodes goes with --num-shards auto"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --job-dir "$T/jobs/u1" --target-shard-mb 0; expect_err "--target-shard-mb"
run_expect 2 "$BIN" prepare --bogus; expect_err "unknown option '--bogus'"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in-ok" --job-dir "$T/jobs/u2" --num-shards 1 --process-cmd 'cp {input}'
expect_err "it must use both {input} and {output}"; no_job_left "$T/jobs/u2"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in-ok" --job-dir "$T/jobs/u2" --num-shards 1 --process-cmd 'cp {input} {output}' --dj-root /x
expect_err "at most one of"; no_job_left "$T/jobs/u2"
run_expect 0 "$BIN" prepare --help; expect_out "usage: eshard-mpi prepare"
pass "$n bad inputs rejected with exit 2 and nothing left behind"
