#!/bin/bash
# --num-shards auto (the default): max(4 x ranks, ceil(normalized bytes / --target-shard-mb)),
# never more than the rows. The shards are the ones an explicit --num-shards of that count
# makes; the manifest records the rule's inputs; a resubmission with auto reuses the job as it
# was cut; run picks 4 shards per rank, and strict mode checks the count prepare made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
write_recipe "$T/recipe.yaml"
# About 2.6 MB in 6000 rows.
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(6000):
        f.write(json.dumps({"id": i, "text": "auto %d " % i + "z" * (300 + i % 200)}) + "\n")
PY
bytes=$(stat -c %s "$T/in.jsonl")
shards_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1] + "/manifest.json"))["num_shards"])' "$1"; }
auto_of() { python3 -c 'import json,sys; a = json.load(open(sys.argv[1] + "/manifest.json"))["num_shards_auto"]; print(a["ranks"], a["target_shard_bytes"], a["normalized_bytes"], a["rows"])' "$1"; }
IN=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl")

# The size rule alone: 1 MiB shards -> ceil(bytes / 1 MiB).
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/size" --target-shard-mb 1
want=$(( (bytes + 1048575) / 1048576 ))
[ "$(shards_of "$T/size")" = "$want" ] || fail "size rule: $(shards_of "$T/size") shards, expected $want"
read -r ranks target nb rows <<<"$(auto_of "$T/size")"
[ "$ranks $target $rows" = "0 1048576 6000" ] && [ "$nb" -gt 0 ] || fail "size rule: manifest records '$ranks $target $nb $rows'"
# Byte-identical to an explicit count.
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/explicit" --num-shards "$want"
for f in "$T/explicit/shards/"*.jsonl; do cmp "$f" "$T/size/shards/$(basename "$f")" || fail "auto and --num-shards $want cut different shards"; done
pass "size rule: $want shards of at most 1 MiB, the same shards as --num-shards $want, rule inputs in the manifest"

# The default target (128 MiB) with 3 nodes: 4 per node.
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/nodes" --nodes 3
[ "$(shards_of "$T/nodes")" = 12 ] || fail "--nodes 3: $(shards_of "$T/nodes") shards, expected 12"
# A resubmission with auto (even with other nodes) reuses the job; an explicit other count does not.
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/nodes" --nodes 5
expect_out "Job is already prepared and unchanged"
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/nodes" --num-shards 12
expect_out "Job is already prepared and unchanged"
run_expect 2 "$BIN" prepare "${IN[@]}" --job-dir "$T/nodes" --num-shards 11
expect_err "does not match this request"
pass "--nodes 3: 12 shards; auto resubmissions reuse the job, another explicit count is refused"

# Never more shards than rows.
printf '{"id":1,"text":"a"}\n{"id":2,"text":"b"}\n' >"$T/two.jsonl"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/two.jsonl" --job-dir "$T/two" --nodes 4
[ "$(shards_of "$T/two")" = 2 ] || fail "2 rows, 4 nodes: $(shards_of "$T/two") shards, expected 2"
pass "2 rows with 4 nodes: 2 shards"

# Counts past what multiplies or converts them are refused, the limit named, nothing made
# (issue 35, item 5: 4 x 4611686018427387904 nodes wrapped to 0 and prepared 1 shard).
TWO=(--config "$T/recipe.yaml" --dataset-path "$T/two.jsonl" --job-dir "$T/huge")
refused() { # WANT CMD...: exit 2 with WANT on stderr, no job folder
  local want=$1; shift
  run_expect 2 "$@"
  expect_err "$want"
  no_job_left "$T/huge"
}
refused "ERROR: eshard-mpi prepare: --nodes 4611686018427387904 is out of range: at most 2147483647 (MPI counts ranks in an int)" \
  "$BIN" prepare "${TWO[@]}" --nodes 4611686018427387904
refused "--nodes 2147483648 is out of range: at most 2147483647" "$BIN" prepare "${TWO[@]}" --nodes 2147483648
refused "--target-shard-mb 8796093022208 is out of range: at most 8796093022207 (it is counted in bytes, 1 MiB each)" \
  "$BIN" prepare "${TWO[@]}" --target-shard-mb 8796093022208
refused "ERROR: eshard-mpi run: --nodes 9223372036854775807 is out of range: at most 2147483647" \
  "$BIN" run "${TWO[@]}" --nodes 9223372036854775807
refused "ERROR: eshard-mpi run: --num-cpus 1e+300 is out of range: at most 2147483647" "$BIN" run "${TWO[@]}" --num-cpus 1e300
refused "ERROR: eshard-mpi worker: --num-cpus 1e+300 is out of range: at most 2147483647" \
  "$BIN" worker --job-dir "$T/huge" --num-cpus 1e300
# The largest accepted: as many shards as rows, like any count of nodes past the rows / 4.
run_expect 0 "$BIN" prepare "${TWO[@]}" --nodes 2147483647 --target-shard-mb 8796093022207
[ "$(shards_of "$T/huge")" = 2 ] || fail "2 rows, 2147483647 nodes: $(shards_of "$T/huge") shards, expected 2"
pass "--nodes, --target-shard-mb and --num-cpus past their limits: exit 2 with the limit named"

# run: 4 shards per rank; the same command again resumes.
cat >"$T/cp.sh" <<'EOF'
#!/bin/sh
cp "$1" "$2"
EOF
chmod +x "$T/cp.sh"
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${IN[@]}" --job-dir "$T/run" --process-cmd "$T/cp.sh {input} {output}"
ranks_expect 2 0
expect_out "shards=auto mode=elastic"
expect_out "PASS: 8 shards were completed"
[ "$(shards_of "$T/run")" = 8 ] || fail "run -np 2: $(shards_of "$T/run") shards, expected 8"
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$T/ref8" --num-shards 8 --process-cmd "$T/cp.sh {input} {output}"
run_expect 0 "$BIN" worker --job-dir "$T/ref8"
run_expect 0 "$BIN" merge --job-dir "$T/ref8" --output "$T/ref8.jsonl"
cmp "$T/ref8.jsonl" "$T/run/merged.jsonl" || fail "run -np 2 auto: merged output differs from a --num-shards 8 job"
ranks_reset
run_expect 0 timeout 100 "$MPIRUN" -np 2 "$T/rank.sh" "$BIN" run "${IN[@]}" --job-dir "$T/run" --process-cmd "$T/cp.sh {input} {output}"
ranks_expect 2 0
expect_out "PASS: 8 shards were completed"
pass "run -np 2: 8 shards (4 per rank), resumable"

# Strict mode checks the count prepare made: one row on two fake hosts cannot give both a shard.
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 2
printf '{"id":1,"text":"a"}\n' >"$T/one.jsonl"
ranks_reset
# shellcheck disable=SC2086
run_expect 2 timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 2 -npernode 1 "$T/rank.sh" "$BIN" run --config "$T/recipe.yaml" \
  --dataset-path "$T/one.jsonl" --job-dir "$T/strict" --process-cmd "$T/cp.sh {input} {output}" --require-all-nodes
ranks_expect 2 2
expect_err "strict mode cannot give every one of 2 nodes a shard with 1 shards"
pass "strict mode refuses an automatic count that cannot give every node a shard, on every rank"
