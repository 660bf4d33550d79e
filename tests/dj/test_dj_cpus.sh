#!/usr/bin/env bash
# Data-Juicer gets every CPU of the node under `mpirun -np 1` with Open MPI's default binding
# (one core): a custom operator (tests/dj/custom_ops/eshard_cpu_ops.py) records, from inside
# the Ray workers of the rank's node-local head, the CPUs it may run on and the CPUs of its Ray
# cluster; the rank's "Started a node-local Ray head" line names them too.
. "$(dirname "$0")/lib_dj.sh"
cd "$SRC"
# lib.sh turns mpirun's binding off for the other tests; this one needs the default.
unset OMPI_MCA_hwloc_base_binding_policy
node=$(python3 -c 'import os; os.sched_setaffinity(0, range(4096)); print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
count=$(wc -w <<<"$node")
[ "$count" -ge 2 ] || fail "this test needs a machine with at least 2 CPUs (the node has $count)"
bound=$("$MPIEXEC" -np 1 sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
[ "$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')" -ge 2 ] || fail "this test must start with every CPU"
case $bound in *-*|*,*) fail "mpirun -np 1 did not bind its rank (it got $bound): the test would prove nothing" ;; esac

cat >"$T/recipe.yaml" <<YAML
executor_type: ray
ray_address: local
text_keys: text
custom_operator_paths: ['$SRC/tests/dj/custom_ops/eshard_cpu_ops.py']
process:
  - eshard_test_cpus_mapper:
      record: '$T/cpus.jsonl'
  - whitespace_normalization_mapper:
YAML
run_expect 0 "$MPIEXEC" -np 1 "$BIN" run --config "$T/recipe.yaml" --dataset-path configs/demo-data \
  --job-dir "$T/job" --num-shards 2 --python "$PY" --dj-process "$DJ"
expect_out "PASS: 2 shards were completed by 1 node(s)"
first=${node%% *}; last=${node##* }
expect_out "with $count CPU(s) ($first-$last)"
expect_err "WARNING: the launcher bound 1 of 1 rank(s) to fewer CPUs than their share of their node"
python3 - "$T/cpus.jsonl" "$node" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
node = [int(c) for c in sys.argv[2].split()]
assert lines, "the operator recorded nothing"
for l in lines:
    assert l["affinity"] == node, ("an operator ran on CPUs %s, not the node's %s" % (l["affinity"], node))
    assert l["ray_cpus"] == float(len(node)), ("the rank's Ray offers %s CPUs, not %d" % (l["ray_cpus"], len(node)))
print("%d operator batches in %d processes, each on CPUs %s of a Ray with %d CPUs"
      % (len(lines), len({l["pid"] for l in lines}), node, len(node)))
PY
pass "Data-Juicer's operators ran on every CPU, in a Ray of every CPU"

# ---- two fake hosts (fakehosts.sh), one rank each under `mpirun -np 2 -npernode 1`: each rank's
# head has every CPU. Both are rank 0 of their host and so try the same ports on this one
# machine: node2's head starts later (a test hook), when node1's holds them, and takes the next
# block, as the head of a second job on a real host would.
. "$SRC/tests/e2e/fakehosts.sh"
fakehosts_check
fakehosts_setup 2
export ESHARD_TEST_HOOK_BEFORE_RAY_HEAD='[ "$(hostname)" != node2 ] || sleep 12'
# shellcheck disable=SC2086
run_expect 0 timeout 600 "$MPIEXEC" $FAKEHOSTS_MPIRUN_ARGS -x ESHARD_TEST_HOOK_BEFORE_RAY_HEAD -np 2 -npernode 1 \
  "$BIN" run --config "$T/recipe.yaml" --dataset-path configs/demo-data --job-dir "$T/hosts" --num-shards 8 \
  --python "$PY" --dj-process "$DJ"
expect_out "PASS: 8 shards were completed by"
[ "$(grep -c "Started a node-local Ray head at .* with $count CPU(s) ($first-$last)" "$T/out")" = 2 ] ||
  { cat "$T/out"; fail "expected two heads, each with $count CPU(s) ($first-$last)"; }
expect_err "WARNING: the launcher bound 2 of 2 rank(s) to fewer CPUs than their share of their node"
pass "two fake hosts: each rank's head has every CPU"
