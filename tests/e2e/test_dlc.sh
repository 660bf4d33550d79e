#!/bin/bash
# eshard-mpi dlc: the worker-broadcast job. Every instance is started at once on its own fake
# host (a UTS namespace, no mpirun), as a platform that runs the one command on every worker:
# one prepare and one merge in elastic mode; strict mode; a missing worker in strict mode and a
# failed shard end every instance with the same code; a killed finalize coordinator's submission
# times out and a new run id finishes the job, while a prepare coordinator killed as it works
# blocks nobody; a reference instance (ref_dlc_peer.py) joins two of ours.
. "$(dirname "$0")/lib.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID OMPI_COMM_WORLD_SIZE PMI_SIZE PMIX_RANK PMIX_SIZE

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(120):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "x" * (i * 37 % 101)}) + "\n")
PY
# The processor reverses its shard; FAIL_SHARD fails that shard, FAIL_ONCE fails that shard's
# first attempt (the flag file FAIL_ONCE_FLAG records it), SLOW sleeps first.
cat >"$T/proc.sh" <<'EOF2'
#!/bin/sh
case "$1" in *"${FAIL_SHARD:-none}"*) exit 3 ;; esac
case "$1" in *"${FAIL_ONCE:-none}"*) mkdir "$FAIL_ONCE_FLAG" 2>/dev/null && exit 3 ;; esac
[ -z "${SLOW:-}" ] || sleep "$SLOW"
tac "$1" >"$2"
EOF2
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --process-cmd "$T/proc.sh {input} {output}"
  --lease-secs 3 --heartbeat-secs 0.5 --poll-interval-secs 0.2 --progress-secs 0)
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 6 \
  --process-cmd "$T/proc.sh {input} {output}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"

# start TAG HOST CMD...: CMD in the background under the host name HOST, output in $T/TAG.*.
PIDS=() TAGS=()
start() {
  local tag=$1 host=$2; shift 2
  unshare --uts sh -c 'hostname "$0"; exec "$@"' "$host" "$@" >"$T/$tag.out" 2>"$T/$tag.err" &
  PIDS+=($!) TAGS+=("$tag")
}
# wait_all: CODES gets every instance's exit code, in start order.
wait_all() {
  CODES=()
  local p c
  for p in "${PIDS[@]}"; do c=0; wait "$p" || c=$?; CODES+=("$c"); done
  PIDS=()
}
# all_codes WANT: every instance of the last wait_all exited with WANT.
all_codes() {
  local c
  for c in "${CODES[@]}"; do
    [ "$c" = "$1" ] || { for t in "${TAGS[@]}"; do echo "--- $t"; cat "$T/$t.out" "$T/$t.err"; done; fail "exit codes ${CODES[*]}, expected all $1"; }
  done
  TAGS=()
}
# count TEXT TAG...: lines starting with TEXT in those instances' stdout.
count() { local s=$1; shift; local t; for t in "$@"; do cat "$T/$t.out"; done | grep -c "^$s" || true; }

# ---- elastic: three instances, one prepare, one merge, one PASS
for i in 1 2 3; do start e$i node$i "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$T/job" --run-id sub-1; done
wait_all; all_codes 0
[ "$(count Prepared e1 e2 e3)" = 1 ] || fail "expected one 'Prepared' line"
[ "$(count Merged e1 e2 e3)" = 1 ] || fail "expected one 'Merged' line"
[ "$(count 'PASS: 6 shards were completed by' e1 e2 e3)" = 1 ] || fail "expected one PASS line"
[ "$(count 'hostname=node[0-9] elected as DLC prepare coordinator.' e1 e2 e3)" = 1 ] || fail "one prepare coordinator"
[ "$(count 'hostname=node[0-9] elected as DLC finalize coordinator.' e1 e2 e3)" = 1 ] || fail "one finalize coordinator"
grep -q '^DLC instance hostname=node1 starting; nodes=not-enforced, shards=6, require_all_nodes=False, max_shards_per_worker=unlimited, coordination_generation=0a80627d4936eb43952d.$' "$T/e1.out" ||
  { cat "$T/e1.out"; fail "start line"; }
cmp "$T/ref.jsonl" "$T/job/merged.jsonl" || fail "merged output differs"
exactly_once "$T/job"
C=$T/.job.dlc-coordination/0a80627d4936eb43952d
for f in prepare.lock finalize.lock prepare-result.json finalize-result.json; do [ -f "$C/$f" ] || fail "no $f"; done
[ ! -e "$C/abort.json" ] || fail "abort.json in a passing job"
[ "$(json_get "$C/finalize-result.json" '["return_code"]')" = 0 ] || fail "finalize result"
python3 - "$C" <<'PY' || fail "coordination files differ from the reference's"
import json, sys, os
c = sys.argv[1]
lock = open(os.path.join(c, "prepare.lock")).read()
d = json.loads(lock)
assert sorted(d) == ["created_at", "hostname", "phase", "pid"] and d["phase"] == "prepare", d
assert lock == json.dumps(d, sort_keys=True) + "\n", lock
r = open(os.path.join(c, "prepare-result.json")).read()
d = json.loads(r)
assert sorted(d) == ["finished_at", "hostname", "phase", "return_code"] and d["return_code"] == 0, d
assert r == json.dumps(d, sort_keys=True, indent=2, ensure_ascii=False) + "\n", r
PY
pass "elastic: one prepare, one merge, exactly once"

# ---- a later instance of the same submission ends with its result at once
run_expect 0 timeout 10 unshare --uts sh -c 'hostname node9; exec "$@"' x "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$T/job" --run-id sub-1
! grep -q 'Starting DLC worker' "$T/out" || fail "a late instance worked again"
pass "late instance"

# ---- strict: three hosts, a cap of 2 each
for i in 1 2 3; do start s$i node$i "$BIN" dlc "${COMMON[@]}" --num-shards 6 --nodes 3 --require-all-nodes --job-dir "$T/sjob" --run-id s-1; done
wait_all; all_codes 0
[ "$(count 'PASS: 6 shards were completed by 3 node(s)' s1 s2 s3)" = 1 ] || fail "strict PASS"
grep -q 'max_shards_per_worker=2,' "$T/s1.out" || fail "strict cap"
pass "strict"

# ---- strict: an attempt that fails once and is retried is no failure of the job
for i in 1 2 3; do start o$i node$i env FAIL_ONCE=part-00002 FAIL_ONCE_FLAG="$T/failed-once" "$BIN" dlc "${COMMON[@]}" \
  --num-shards 6 --nodes 3 --require-all-nodes --job-dir "$T/ojob" --run-id o-1; done
wait_all; all_codes 0
[ -d "$T/failed-once" ] || fail "no attempt failed"
[ "$(count 'PASS: 6 shards were completed by 3 node(s)' o1 o2 o3)" = 1 ] || fail "strict PASS after a retry"
pass "strict with a retried attempt"

# ---- strict: an automatic shard count below --nodes fails the prepare result, for everyone
head -n 2 "$T/in.jsonl" >"$T/two.jsonl"
for i in 1 2 3; do start a$i node$i "$BIN" dlc "${COMMON[@]}" --dataset-path "$T/two.jsonl" --nodes 3 --require-all-nodes \
  --job-dir "$T/ajob" --run-id a-1; done
wait_all; all_codes 2
[ "$(json_get "$T/.ajob.dlc-coordination/"*/prepare-result.json '["return_code"]')" = 2 ] || fail "prepare result of a failed cap"
[ "$(count 'Starting DLC worker' a1 a2 a3)" = 0 ] || fail "an instance worked with a failed cap"
pass "strict cap checked by the prepare coordinator"

# ---- strict with a worker missing: every instance fails with the same code within the timeout
t0=$(date +%s)
for i in 1 2; do start m$i node$i "$BIN" dlc "${COMMON[@]}" --num-shards 6 --nodes 3 --require-all-nodes --job-dir "$T/mjob" --run-id m-1 --wait-timeout-secs 4; done
wait_all; all_codes 2
# Within the 4 s given, not the default (35 h); the bound leaves room for a loaded machine.
[ $(($(date +%s) - t0)) -lt 60 ] || fail "the missing worker's wait took $(($(date +%s) - t0)) s"
grep -q 'timed out after 4s waiting for all shards ([0-9]/6 done)' "$T/.mjob.dlc-coordination/"*/abort.json || fail "abort reason"
pass "strict with a missing worker"

# ---- a shard that fails for good aborts every instance with the same code
for i in 1 2 3; do start f$i node$i env FAIL_SHARD=part-00002 "$BIN" dlc "${COMMON[@]}" --num-shards 6 --max-retries 0 --job-dir "$T/fjob" --run-id f-1; done
wait_all; all_codes 2
[ "$(count PASS f1 f2 f3)" = 0 ] || fail "PASS in a failed job"
[ -f "$T/.fjob.dlc-coordination/"*/abort.json ] || fail "no abort record"
pass "terminal failure"

# wait_file GLOB: until a file matches GLOB (10 s at most).
wait_file() { local _; for _ in $(seq 100); do compgen -G "$1" >/dev/null && return 0; sleep 0.1; done; fail "no $1"; }

# ---- the prepare coordinator is killed while it works: the others finish the job without it
t0=$(date +%s)
for i in 1 2 3; do start k$i node$i env SLOW=1 "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$T/kjob" --run-id k-1 --wait-timeout-secs 60; done
wait_file "$T/.kjob.dlc-coordination/*/prepare-result.json"
victim=
for i in 0 1 2; do grep -q 'elected as DLC prepare coordinator' "$T/k$((i + 1)).out" && victim=$i; done
[ -n "$victim" ] || fail "no prepare coordinator"
kill -KILL "${PIDS[$victim]}"
wait_all
for i in 0 1 2; do
  [ "$i" = "$victim" ] && continue
  [ "${CODES[$i]}" = 0 ] || { cat "$T/k$((i + 1)).out" "$T/k$((i + 1)).err"; fail "instance $i exited ${CODES[$i]}"; }
done
[ $(($(date +%s) - t0)) -lt 40 ] || fail "the others waited for the killed coordinator"
[ "$(count 'PASS: 6 shards' k1 k2 k3)" = 1 ] || fail "PASS without the killed coordinator"
cmp "$T/ref.jsonl" "$T/kjob/merged.jsonl" || fail "output without the killed coordinator differs"
exactly_once "$T/kjob" --stale-ok
TAGS=()
pass "killed prepare coordinator"

# ---- the finalize coordinator dies: its submission times out, a new run id finishes the job
for i in 1 2 3; do start z$i node$i env ESHARD_TEST_CRASH_AT=dlc-finalize-elected "$BIN" dlc "${COMMON[@]}" --num-shards 6 \
  --job-dir "$T/zjob" --run-id z-1 --wait-timeout-secs 5; done
wait_all
[ "$(printf '%s\n' "${CODES[@]}" | sort | tr '\n' ' ')" = "2 2 99 " ] || fail "exit codes ${CODES[*]}, expected 99 (the crash) and 2 2"
for i in 1 2 3; do
  grep -q 'crash point' "$T/z$i.err" || grep -q 'timed out after 5s waiting for DLC final verification' "$T/z$i.err" || fail "z$i: timeout message"
done
TAGS=()
for i in 1 2 3; do start r$i node$i "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$T/zjob" --run-id z-2; done
wait_all; all_codes 0
[ "$(count 'PASS: 6 shards' r1 r2 r3)" = 1 ] || fail "resubmission PASS"
cmp "$T/ref.jsonl" "$T/zjob/merged.jsonl" || fail "resubmission output differs"
exactly_once "$T/zjob" --stale-ok
pass "killed finalize coordinator, new run id"

# ---- a reference instance joins two of ours, first and last
for order in first last; do
  job=$T/ijob-$order
  [ $order = first ] || { start i1 node1 "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$job" --run-id i-$order
    wait_file "$T/.ijob-$order.dlc-coordination/*/prepare.lock"; }
  start ip node3 python3 "$SRC/tests/e2e/ref_dlc_peer.py" "$BIN" "$job" "i-$order" 30 0.2 -- \
    --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 6 --process-cmd "$T/proc.sh {input} {output}" \
    --lease-secs 3 --heartbeat-secs 0.5 -- --poll-interval-secs 1
  # First: ours start once the reference instance holds the prepare election.
  for _ in $(seq 100); do [ $order = last ] || grep -q 'elected as DLC prepare' "$T/ip.out" && break; sleep 0.1; done
  [ $order = last ] || { start i1 node1 "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$job" --run-id i-$order; }
  start i2 node2 "$BIN" dlc "${COMMON[@]}" --num-shards 6 --job-dir "$job" --run-id i-$order
  wait_all; all_codes 0
  [ "$(count Prepared i1 i2 ip)" = 1 ] || fail "$order: expected one 'Prepared' line"
  [ "$(count 'PASS: 6 shards' i1 i2 ip)" = 1 ] || fail "$order: expected one PASS line"
  grep -q 'elected as DLC prepare coordinator' "$T/$([ $order = first ] && echo ip || echo i1).out" || fail "$order: prepare coordinator"
  cmp "$T/ref.jsonl" "$job/merged.jsonl" || fail "$order: merged output differs"
  exactly_once "$job"
done
pass "interop with a reference instance"

# ---- usage: no submission id, strict without --nodes, under a launcher
run_expect 2 "$BIN" dlc "${COMMON[@]}" --job-dir "$T/ujob"
expect_err "no submission id"
run_expect 2 "$BIN" dlc "${COMMON[@]}" --job-dir "$T/ujob" --run-id u --require-all-nodes
expect_err "needs --nodes"
run_expect 2 env OMPI_COMM_WORLD_SIZE=2 "$BIN" dlc "${COMMON[@]}" --job-dir "$T/ujob" --run-id u
expect_err "use 'eshard-mpi run'"
[ ! -e "$T/ujob" ] && [ ! -e "$T/.ujob.dlc-coordination" ] || fail "a usage error left state"
pass "usage errors"
