#!/bin/bash
# The ranks of `run` share prepare's first pass (issue 30; README "Prepare at scale"), on fake
# hosts (fakehosts.sh): every rank reads its slice of the input's byte ranges, and the job
# folder (manifest less created_at, recipe, shards) is byte for byte that of `prepare
# --threads 1`, for -np 1/2/4 over nested folders, CRLF lines, a long line, an empty file, a
# last line without '\n', media paths, index keys, gzip and zstd, --bad-lines skip and 1/3/7/16
# shards. A bad line on the last rank and one on the first: the first is said by rank 0, as
# prepare says it, and every rank exits 2. A rank that cannot read the stage folder leaves the
# reading to rank 0 (a NOTE). A crash of a rank other than 0 in the middle leaves no job folder,
# and the rerun succeeds.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranges_lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
need_test_hooks
fakehosts_check
fakehosts_setup 4
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
# Tiny ranges: every rank gets many; each rank says which it read (a test-build hook).
export ESHARD_TEST_RANGE_BYTES=150 ESHARD_TEST_PREPARE_RANKS=1
# shellcheck disable=SC2086
fake_mpirun() { timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS "$@"; }

IN=$T/in
ranges_input "$IN"
write_recipe "$T/recipe.yaml" # index key global_index
PLAIN=(--process-cmd 'cp {input} {output}')


# slices NP: the ranges each rank said it read ("prepare rank R: ranges LO to HI of N") tile
# the plan in rank order, and every rank read some.
slices() {
  python3 - "$T/err" "$1" <<'PY' || { cat "$T/err"; fail "the ranks did not share the ranges"; }
import re, sys
got = {int(m[0]): (int(m[1]), int(m[2]), int(m[3]))
       for m in re.findall(r"prepare rank (\d+): ranges (\d+) to (\d+) of (\d+),", open(sys.argv[1]).read())}
np = int(sys.argv[2])
assert sorted(got) == list(range(np)), got
n, at = got[0][2], 0
for r in range(np):
    lo, hi, nr = got[r]
    assert nr == n and lo == at and hi > lo, (r, got)
    at = hi
assert at == n, got
PY
}

# ranked NAME NP ARGS...: `run` on NP ranks (one per fake host) into $T/NAME/np<NP>/job, then
# its job folder against prepare --threads 1's in $T/NAME/ref/job.
ranked() {
  local name=$1 np=$2; shift 2
  [ -e "$T/$name/ref/job" ] || run_expect 0 "$BIN" prepare --job-dir "$T/$name/ref/job" --threads 1 "$@"
  ranks_reset
  run_expect 0 fake_mpirun -np "$np" -npernode 1 "$T/rank.sh" "$BIN" run --job-dir "$T/$name/np$np/job" "$@"
  ranks_expect "$np" 0
  if [ "$np" -gt 1 ]; then slices "$np"; fi
  same_job "$T/$name/ref/job" "$T/$name/np$np/job"
}

for np in 2 4 1; do
  ranked plain-7 "$np" "${PLAIN[@]}" --dataset-path "$IN" --num-shards 7
done
for n in 1 3 16; do
  ranked "plain-$n" 4 "${PLAIN[@]}" --dataset-path "$IN" --num-shards "$n"
done
pass "-np 1/2/4 x 1/3/7/16 shards: every rank read a slice; the job folders of prepare --threads 1"

for np in 2 4; do
  ranked index-7 "$np" --config "$T/recipe.yaml" "${PLAIN[@]}" --dataset-path "$IN" --num-shards 7
done
grep -q '"global_index":299' "$T/index-7/np4/job/shards/part-00006-of-00007.jsonl" || fail "index keys missing"
pass "index keys: the job folders of prepare --threads 1"

mkdir -p "$T/mixed/sub"
cp "$IN/a.jsonl" "$T/mixed/a.jsonl"
gzip -c "$IN/nested/deeper/d.jsonl" >"$T/mixed/sub/d.jsonl.gz"
zstd -q -c "$IN/nested/b.jsonl" >"$T/mixed/sub/b.jsonl.zst"
cp "$IN/a.jsonl" "$T/mixed/z.jsonl"
ranked gz 4 "${PLAIN[@]}" --dataset-path "$T/mixed" --compressed --num-shards 7
mkdir -p "$T/bad"
cp "$IN/a.jsonl" "$T/bad/a.jsonl"
cp "$IN/nested/deeper/d.jsonl" "$T/bad/d.jsonl"
sed -i -e '3s/.*/not json/' -e '90s/.*//' "$T/bad/a.jsonl"
sed -i -e '150s/.*/[1]/' "$T/bad/d.jsonl"
ranked skip 4 "${PLAIN[@]}" --dataset-path "$T/bad" --num-shards 3 --bad-lines skip
pass "gzip and zstd, --bad-lines skip: the job folders of prepare --threads 1"

# Errors: a bad line in rank 0's first range (held back a second, so that the last rank fails
# first) and one at the end of the input, on the last rank. rank 0 says the first, as prepare
# does; every rank exits 2; nothing is left.
mkdir -p "$T/e1"
cp "$IN/a.jsonl" "$T/e1/a.jsonl"
cp "$IN/nested/deeper/d.jsonl" "$T/e1/d.jsonl"
sed -i '2s/.*/{"broken": /' "$T/e1/a.jsonl"
echo '{"also": broken}' >>"$T/e1/d.jsonl"
export ESHARD_TEST_RANGE_BYTES=2000
run_expect 2 "$BIN" prepare "${PLAIN[@]}" --job-dir "$T/fail/prep" --threads 1 --dataset-path "$T/e1" --num-shards 2
want=$(sed -n 's/^.*ERROR: //p' "$T/err")
[ -n "$want" ] || { cat "$T/err"; fail "prepare said no error"; }
ranks_reset
# shellcheck disable=SC2086
run_expect "$(noabort_rc 2)" env ESHARD_TEST_RANGE_DELAY_MS=1000 ESHARD_TEST_RANGE_DELAY_ONLY=0 timeout 100 \
  "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS $RANKS_NOABORT -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${PLAIN[@]}" --job-dir "$T/fail/job" \
  --dataset-path "$T/e1" --num-shards 2
ranks_expect 4 2
slices 4
[ "$(grep -c 'ERROR' "$T/err")" = 1 ] || { cat "$T/err"; fail "expected exactly one ERROR line"; }
grep -qF "[rank 0 node1] ERROR: $want" "$T/err" || { cat "$T/err"; fail "rank 0 did not say prepare's error: $want"; }
expect_err "a.jsonl:2"
no_job_left "$T/fail/job"
pass "a bad line on the first rank and one on the last: rank 0 says the first, as prepare; exit 2 everywhere"
export ESHARD_TEST_RANGE_BYTES=150

# A rank that cannot read the stage folder (the shared file system is not mounted on node4):
# it says so, rank 0 reads every range, and prepare publishes the same job (the worker of that
# node then cannot start, and the job stops with exit 2, as test_run_hosts checks).
mkdir -p "$T/shared"
ranks_reset
# shellcheck disable=SC2086
run_expect "$(noabort_rc 2)" env FAKEHOSTS_HIDE="node4 $T/shared" timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS \
  $RANKS_NOABORT -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${PLAIN[@]}" --job-dir "$T/shared/job" \
  --dataset-path "$IN" --num-shards 7
ranks_expect 4 2
expect_err "[rank 3 node4] NOTE: this rank cannot read prepare's stage folder"
expect_err "prepare rank 0: ranges 0 to 0 of 0,"
same_job "$T/plain-7/ref/job" "$T/shared/job"
pass "a rank that cannot see the stage folder: a NOTE, rank 0 reads alone, the same job folder"

# A crash of a rank other than 0 after it read its ranges: no job folder; the rerun succeeds and
# sweeps the dead stage.
ranks_reset
got=0
ESHARD_TEST_CRASH_AT=prepare-rank-ranges fake_mpirun -np 4 -npernode 1 "$BIN" run "${PLAIN[@]}" \
  --job-dir "$T/crash/np4/job" --dataset-path "$IN" --num-shards 7 >"$T/out" 2>"$T/err" || got=$?
[ "$got" != 0 ] || { cat "$T/err"; fail "the run went on after a rank crashed"; }
expect_err "eshard test crash point 'prepare-rank-ranges' reached"
[ ! -e "$T/crash/np4/job" ] || fail "a job folder was left after a rank crashed in prepare"
compgen -G "$T/crash/np4/.job.preparing.*" >/dev/null || fail "the crash left no stage folder (did it crash in prepare?)"
ranked crash 4 "${PLAIN[@]}" --dataset-path "$IN" --num-shards 7
expect_err "the stage folder of a prepare that is gone"
if compgen -G "$T/crash/np4/.job.preparing.*" >/dev/null; then fail "a stage folder was left after the rerun"; fi
pass "a rank other than 0 crashes in prepare: no job folder; the rerun succeeds"

test_done
