#!/usr/bin/env bash
# Operator kinds from the REAL Data-Juicer registry (docs/design.md#recipe-checks), through the
# helper scripts/dj_op_kinds.py and through `eshard-mpi prepare --python <venv python>`: a Mapper
# and a Filter are accepted, a Deduplicator and a Selector are rejected with the reference's
# message, unknown names are rejected (also one that only looks like a Mapper, which the
# naming-convention fallback would accept: proof that the registry answered), and a custom Mapper
# registered by tests/dj/custom_ops/eshard_test_ops.py is accepted once loaded through
# custom_operator_paths; a mistyped name gets the closest registered one as a hint.
. "$(dirname "$0")/../e2e/lib.sh"

VENV=${ESHARD_DJ_VENV:-$SRC/.venv-dj}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import data_juicer' 2>/dev/null; then
  bash "$SRC/scripts/setup-dj-env.sh" "$VENV" >/dev/null || fail "cannot set up $VENV"
fi
PY=$VENV/bin/python
HELPER=$SRC/scripts/dj_op_kinds.py
CUSTOM=$SRC/tests/dj/custom_ops/eshard_test_ops.py
DATA=$SRC/configs/demo-data
[ -f "$CUSTOM" ] || fail "missing $CUSTOM"

# 1. The helper alone.
run_expect 0 "$PY" "$HELPER" --custom-path "$CUSTOM" -- \
  whitespace_normalization_mapper text_length_filter document_deduplicator \
  topk_specified_field_selector eshard_no_such_op eshard_no_such_mapper eshard_test_upper_mapper
python3 - "$T/out" <<'PY' || fail "helper answer is wrong: $(cat "$T/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines  # stdout carries the JSON line and nothing else
ops = json.loads(lines[0])["ops"]
def kind(name):
    o = ops[name]
    return (o["known"], o["mapper"], o["filter"], o["global"])
want = {
    "whitespace_normalization_mapper": (True, True, False, False),
    "text_length_filter": (True, False, True, False),
    "document_deduplicator": (True, False, False, False),
    "topk_specified_field_selector": (True, False, False, False),
    "eshard_no_such_op": (False, False, False, False),
    "eshard_no_such_mapper": (False, False, False, False),
    "eshard_test_upper_mapper": (True, True, False, False),
}
for name, k in want.items():
    assert kind(name) == k, (name, kind(name), k)
# Some names are unknown: the answer lists the registry's names for "did you mean".
reg = json.loads(lines[0])["registered"]
assert reg == sorted(reg) and "whitespace_normalization_mapper" in reg and "eshard_test_upper_mapper" in reg, reg[:5]
assert "eshard_no_such_op" not in reg
PY
run_expect 0 "$PY" "$HELPER" whitespace_normalization_mapper
grep -q '"registered"' "$T/out" && fail "registry names listed although every name is known: $(cat "$T/out")"
pass "helper: kinds from the registry, custom Mapper registered, the registry's names when one is unknown"

# Without its path the custom operator is unknown to the registry.
run_expect 0 "$PY" "$HELPER" eshard_test_upper_mapper
grep -qF '"eshard_test_upper_mapper": {"known": false' "$T/out" || fail "custom op known without its path: $(cat "$T/out")"
# A custom path that does not load: exit 4 with one ERROR line.
run_expect 4 "$PY" "$HELPER" --custom-path "$T/missing_ops.py" whitespace_normalization_mapper
expect_err "ERROR:"
pass "helper: custom op needs its path; a bad path is exit 4"

# 2. Through prepare. recipe FILE OPS...: a recipe with one line per operator.
recipe() {
  local f=$1; shift
  { echo "executor_type: ray"; echo "ray_address: local"; echo "text_keys: text"; echo "process:"
    for op in "$@"; do echo "  - $op:"; done; } >"$f"
}
prep() { # WANT RECIPE JOBNAME
  run_expect "$1" "$BIN" prepare --python "$PY" --config "$2" --dataset-path "$DATA" \
    --job-dir "$T/$3" --num-shards 2
}

recipe "$T/ok.yaml" whitespace_normalization_mapper text_length_filter
prep 0 "$T/ok.yaml" j-ok
expect_out "Prepared 2 shards"
if grep -q "WARNING" "$T/err"; then cat "$T/err"; fail "warnings for a Mapper + Filter recipe"; fi
pass "prepare: Mapper + Filter accepted"

for op in document_deduplicator topk_specified_field_selector; do
  recipe "$T/$op.yaml" whitespace_normalization_mapper "$op"
  prep 2 "$T/$op.yaml" "j-$op"
  expect_err "Operator '$op' requires or may require whole-dataset semantics and cannot run shard by shard"
  no_job_left "$T/j-$op"
done
pass "prepare: Deduplicator and Selector rejected"

for op in eshard_no_such_op eshard_no_such_mapper eshard_test_upper_mapper; do
  recipe "$T/$op.yaml" "$op"
  prep 2 "$T/$op.yaml" "j-$op"
  expect_err "Unknown operator '$op'; cannot prove it is shard-safe"
  no_job_left "$T/j-$op"
done
pass "prepare: unknown operators rejected (also a *_mapper name and a custom op without its path)"

# A near miss: the closest registered name as a hint.
recipe "$T/typo.yaml" whitespace_normalisation_mapper
prep 2 "$T/typo.yaml" j-typo
expect_err "Unknown operator 'whitespace_normalisation_mapper'; cannot prove it is shard-safe (did you mean 'whitespace_normalization_mapper'?)"
no_job_left "$T/j-typo"
pass "prepare: a mistyped operator gets the closest registered name"

# The custom Mapper through custom_operator_paths: an absolute path from anywhere, and a path
# relative to the folder prepare runs in (the repository root here).
for path in "$CUSTOM" tests/dj/custom_ops/eshard_test_ops.py; do
  { echo "executor_type: ray"; echo "ray_address: local"; echo "text_keys: text"
    echo "custom_operator_paths:"; echo "  - $path"
    echo "process:"; echo "  - eshard_test_upper_mapper:"; echo "  - text_length_filter:"; } >"$T/custom.yaml"
  rm -rf "$T/j-custom"
  (cd "$SRC" && run_expect 0 "$BIN" prepare --python "$PY" --config "$T/custom.yaml" --dataset-path "$DATA" \
    --job-dir "$T/j-custom" --num-shards 2) || exit 1
  if grep -q "WARNING" "$T/err"; then cat "$T/err"; fail "warnings for the custom Mapper recipe"; fi
  [ -f "$T/j-custom/manifest.json" ] || fail "no manifest for the custom Mapper recipe"
done
pass "prepare: custom Mapper accepted through custom_operator_paths"
echo "PASS test_op_kinds"
