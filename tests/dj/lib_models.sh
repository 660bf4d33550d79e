# Shared part of the model reuse tests (test_dj_models_task.sh, test_dj_models_actor.sh): 40
# rows in 8 shards through eshard_test_model_mapper (tests/dj/custom_ops/eshard_model_ops.py),
# whose loader appends its pid to a log per model load.
. "$(dirname "${BASH_SOURCE[0]}")/lib_dj.sh"
OPS=$SRC/tests/dj/custom_ops/eshard_model_ops.py
mkdir -p "$T/in"
python3 - "$T/in/rows.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "text": "row %03d of the model test" % i}) + "\n")
PY
cd "$T"

# models_run TAG MODE NP [FLAG FAILMODE]: one `eshard-mpi run` of the 8 shards with NP ranks and
# ray_execution_mode MODE; the loads go to $T/loads.TAG, the job to $T/job.TAG.
models_run() {
  local tag=$1 mode=$2 np=$3 flag=${4:-} fmode=${5:-raise}
  cat >"$T/recipe.$tag.yaml" <<YAML
project_name: eshard-models-$tag
executor_type: ray
ray_address: local
text_keys: text
np: 1
skip_op_error: false
custom_operator_paths: ['$OPS']
process:
  - eshard_test_model_mapper:
      load_log: '$T/loads.$tag'
      flag: '$flag'
      mode: $fmode
      ray_execution_mode: $mode
      num_proc: 1
YAML
  : >"$T/loads.$tag"
  local t0=$SECONDS
  run_expect 0 "$MPIEXEC" --oversubscribe -np "$np" "$BIN" run --config "recipe.$tag.yaml" \
    --dataset-path in --job-dir "$T/job.$tag" --num-shards 8 --python "$PY" --dj-process "$DJ"
  expect_out "PASS: 8 shards were completed"
  echo "$tag: $(wc -l <"$T/loads.$tag") loads in $((SECONDS - t0)) s"
}

# models_check TAG MAXLOADS: every row came through the model (in input order); no process
# loaded the model twice; at most MAXLOADS loads in all.
models_check() {
  python3 - "$T/job.$1/merged.jsonl" "$T/loads.$1" "$2" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
assert [r["id"] for r in rows] == list(range(40)), [r["id"] for r in rows]
for r in rows:
    assert r["text"] == "row %03d of the model test +m" % r["id"], r
loads = [l.strip() for l in open(sys.argv[2]) if l.strip()]
per_pid = collections.Counter(loads)
print("loads per process:", dict(per_pid))
assert all(n == 1 for n in per_pid.values()), "a process loaded the model more than once: %s" % dict(per_pid)
assert 1 <= len(loads) <= int(sys.argv[3]), "%d loads, at most %s expected" % (len(loads), sys.argv[3])
PY
}
