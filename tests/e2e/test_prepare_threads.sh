#!/usr/bin/env bash
# prepare --threads (issue 30): the input cut into byte ranges at line ends and read in
# parallel gives the job folder of one thread byte for byte (manifest less created_at, recipe,
# shards): nested folders, CRLF lines, a long line, an empty file, media paths, index keys,
# gzip and zstd, --bad-lines skip, 1/3/7/16 shards, --threads 1/2/7. Errors are those of one
# thread: the first bad line in input order is the one said, even when a later range fails
# first; a bad line deep in a file is said with its line number. A progress line comes every
# --progress-secs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranges_lib.sh"
need_test_hooks
# Tiny ranges: each file is cut into many, a long line spans several nominal cuts.
export ESHARD_TEST_RANGE_BYTES=150

IN=$T/in
ranges_input "$IN"
write_recipe "$T/recipe.yaml"             # index key global_index
# Without a recipe (quicker to check) and without index keys: ranges that do not know their
# line numbers beforehand.
PLAIN=(--process-cmd 'cp {input} {output}')


# prep NAME THREADS ARGS...: prepare into $T/NAME/t<THREADS>/job.
prep() {
  local name=$1 t=$2; shift 2
  run_expect 0 "$BIN" prepare --job-dir "$T/$name/t$t/job" --threads "$t" "$@"
}

# Index keys come with a recipe (slower to check: one shard count only).
for n in 1 3 7 16; do
  for t in 1 2 7; do
    prep "plain-$n" "$t" "${PLAIN[@]}" --dataset-path "$IN" --num-shards "$n"
    if [ $n = 7 ]; then prep "index-$n" "$t" --config "$T/recipe.yaml" --dataset-path "$IN" --num-shards "$n"; fi
  done
  for t in 2 7; do
    same_job "$T/plain-$n/t1/job" "$T/plain-$n/t$t/job"
    if [ $n = 7 ]; then same_job "$T/index-$n/t1/job" "$T/index-$n/t$t/job"; fi
  done
done
grep -q '"global_index":299' "$T/index-7/t7/job/shards/part-00006-of-00007.jsonl" || fail "index keys missing"
pass "--threads 1/2/7 x 1/3/7/16 shards, with and without index keys: the same job folders"

# gzip and zstd beside plain files (each compressed file is one range).
mkdir -p "$T/mixed/sub"
cp "$IN/a.jsonl" "$T/mixed/a.jsonl"
gzip -c "$IN/nested/deeper/d.jsonl" >"$T/mixed/sub/d.jsonl.gz"
zstd -q -c "$IN/nested/b.jsonl" >"$T/mixed/sub/b.jsonl.zst"
cp "$IN/a.jsonl" "$T/mixed/z.jsonl"
for t in 1 2 7; do
  prep gz "$t" "${PLAIN[@]}" --dataset-path "$T/mixed" --compressed --num-shards 7
done
same_job "$T/gz/t1/job" "$T/gz/t2/job"
same_job "$T/gz/t1/job" "$T/gz/t7/job"
pass "gzip and zstd inputs: the same job folders"

# --bad-lines skip: the bad lines listed with their files and line numbers, as by one thread.
mkdir -p "$T/bad"
cp "$IN/a.jsonl" "$T/bad/a.jsonl"
cp "$IN/nested/deeper/d.jsonl" "$T/bad/d.jsonl"
sed -i -e '3s/.*/not json/' -e '90s/.*//' "$T/bad/a.jsonl"
sed -i -e '150s/.*/[1]/' "$T/bad/d.jsonl"
for t in 1 2 7; do
  prep skip "$t" "${PLAIN[@]}" --dataset-path "$T/bad" --num-shards 3 --bad-lines skip
done
same_job "$T/skip/t1/job" "$T/skip/t2/job"
same_job "$T/skip/t1/job" "$T/skip/t7/job"
python3 - "$T/skip/t7/job/manifest.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["bad_lines"]
assert [(x["relative_path"], x["line"]) for x in b["first"]] == [("a.jsonl", 3), ("a.jsonl", 90), ("d.jsonl", 150)], b
PY
pass "--bad-lines skip: the same job folders, bad lines by file and line"

# Errors: a bad line in the first range and another in the last; the first is said, as by one
# thread, whichever range fails first. Then one deep in a file: its line number is right.
# expect_same_error ARGS...: --threads 1, 2 and 7 fail alike, with the same stderr.
expect_same_error() {
  local t
  for t in 1 2 7; do
    run_expect 2 "$BIN" prepare "${PLAIN[@]}" --job-dir "$T/fail/job$t" --threads "$t" "$@"
    cp "$T/err" "$T/err.t$t"
    no_job_left "$T/fail/job$t"
  done
  cmp "$T/err.t1" "$T/err.t2" || { cat "$T/err.t1" "$T/err.t2"; fail "stderr of --threads 2 differs"; }
  cmp "$T/err.t1" "$T/err.t7" || { cat "$T/err.t1" "$T/err.t7"; fail "stderr of --threads 7 differs"; }
}
mkdir -p "$T/e1"
cp "$IN/a.jsonl" "$T/e1/a.jsonl"
cp "$IN/nested/deeper/d.jsonl" "$T/e1/d.jsonl"
sed -i '2s/.*/{"broken": /' "$T/e1/a.jsonl"
echo '{"also": broken}' >>"$T/e1/d.jsonl"
# The first range is held back a second, so that the last one fails first.
ESHARD_TEST_RANGE_BYTES=2000 ESHARD_TEST_RANGE_DELAY_MS=1000 ESHARD_TEST_RANGE_DELAY_ONLY=0 \
  expect_same_error --dataset-path "$T/e1" --num-shards 2
expect_err "a.jsonl:2"
pass "the first bad line in input order is said, though a later range failed first"

sed -i '2s/.*/{"id": 1}/' "$T/e1/a.jsonl"
sed -i '77s/.*//' "$T/e1/d.jsonl"
expect_same_error --dataset-path "$T/e1" --num-shards 2
expect_err "Blank JSONL record at $(cd "$T/e1" && pwd -P)/d.jsonl:77"
pass "a bad line deep in a file: its line number as by one thread"

sed -i '77s/.*/{"id": 77}/' "$T/e1/d.jsonl"
expect_same_error --dataset-path "$T/e1" --num-shards 2 --max-line-bytes 1000
expect_err "a.jsonl:8"
pass "a line over --max-line-bytes inside a file: said as by one thread"

# The progress line: one at least, with bytes done of the total, MB/s and ETA (ranges made
# slow enough for a prepare of seconds).
ESHARD_TEST_RANGE_DELAY_MS=250 ESHARD_TEST_RANGE_BYTES=3000 run_expect 0 "$BIN" prepare "${PLAIN[@]}" \
  --dataset-path "$IN" --job-dir "$T/slow/job" --threads 2 --progress-secs 1 --num-shards 2
grep -Eq '^prepare: [0-9]+ of [0-9]+ MB read \([0-9]+%\), [0-9]+ MB/s, ETA [0-9]+ s$' "$T/err" ||
  { cat "$T/err"; fail "no progress line"; }
pass "a progress line every --progress-secs"

# A stop during the parallel read is acted on at once, even in ranges of few lines (each range
# here is one slow line-short range of 300 ms: 40 of them on 2 threads take 6 s); it leaves no
# job folder and no stage folder.
mkdir -p "$T/big"
python3 -c 'import json; print("\n".join(json.dumps({"id": i, "text": "row %d " % i + "s" * 80}) for i in range(400)))' >"$T/big/a.jsonl"
ESHARD_TEST_RANGE_DELAY_MS=300 ESHARD_TEST_RANGE_BYTES=1000 "$BIN" prepare "${PLAIN[@]}" --dataset-path "$T/big" \
  --job-dir "$T/stop/job" --threads 2 --num-shards 2 --progress-secs 1 >"$T/stop.out" 2>"$T/stop.err" &
pid=$!
# The first progress line says the read is under way (after a second, of the six).
wait_for 10 grep -q "MB read" "$T/stop.err"
kill -TERM "$pid"
wait_for 2.5 eval '! kill -0 "$pid" 2>/dev/null' || { kill -KILL "$pid"; fail "prepare went on reading for 2.5 s after SIGTERM"; }
rc=0; wait "$pid" || rc=$?
[ "$rc" = 143 ] || { cat "$T/stop.err"; fail "stopped prepare exited $rc, not 143"; }
grep -q "prepare stopped by signal 15" "$T/stop.err" || { cat "$T/stop.err"; fail "no stop message"; }
[ ! -e "$T/stop/job" ] || fail "a stopped prepare left a job folder"
[ -z "$(ls -A "$T/stop" 2>/dev/null)" ] || { ls -la "$T/stop"; fail "a stopped prepare left: $(ls -A "$T/stop")"; }
pass "SIGTERM during the parallel read: exit 143 at once, nothing left"
