#!/usr/bin/env bash
# Real Data-Juicer on a real Ray runtime per attempt (--ray-mode per-attempt, the reference's
# way), through mpirun -np 2 eshard-mpi run:
# the merged output holds exactly the records of one plain dj-process run of the same recipe
# over the whole input; a shard whose rows are all filtered out ends done with 0 rows.
. "$(dirname "$0")/lib_dj.sh"

# 16 rows of equal length (two-digit ids), so that 4 byte-balanced shards get 4 rows each; the last 4 rows are
# shorter than the recipe's min_len (20) and are all filtered out: shard 3 ends empty.
mkdir -p "$T/in/nested"
python3 - "$T/in" <<'PY'
import json, sys
out = sys.argv[1]
for name, ids in (("a.jsonl", range(10, 18)), ("nested/b.jsonl", range(18, 26))):
    with open(f"{out}/{name}", "w") as f:
        for i in ids:
            if i < 22:
                rec = {"id": i, "text": "row %02d  has   plenty of  text\tto keep" % i, "p": ""}
            else:
                rec = {"id": i, "text": "tiny %02d" % i, "p": "x" * 30}
            f.write(json.dumps(rec) + "\n")
PY
cp "$SRC/configs/demo.yaml" "$T/recipe.yaml"
cd "$T"

run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config recipe.yaml --dataset-path in \
  --job-dir "$T/job" --num-shards 4 --python "$PY" --dj-process "$DJ" --ray-mode per-attempt
expect_out "PASS: 4 shards were completed by 1 node(s); merged 12 rows into $T/job/merged.jsonl"
pass "mpirun -np 2 run with real Data-Juicer passed"

python3 - "$T/job" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
assert not any("registry was not consulted" in w for w in m["warnings"]), m["warnings"]
for s in m["shards"]:
    d = json.load(open(os.path.join(job, "state/done", s["id"] + ".json")))
    assert d["executor_type"] == "ray" and d["ray_address"] == "local", d
    assert d["data_juicer_commit"] == m["data_juicer"]["commit"] != "unknown", (d, m["data_juicer"])
    log = open(os.path.join(job, os.path.dirname(d["output_path"]), "process.log")).read()
    assert "Initializing Ray" in log and ("ray_executor" in log or "RayExecutor" in log), "no Ray executor in the log of " + s["id"]
    if s["index"] == 3:
        assert d["rows"] == 0 and d["size_bytes"] == 0, d
    else:
        assert d["rows"] == 4, d
print("done records: executor ray, address local, Ray executor in every log, empty shard done with 0 rows")
PY

# One plain dj-process run of the same recipe over the whole input.
"$DJ" --config recipe.yaml --dataset_path "$T/in" --export_path "$T/plain/out.jsonl" \
  --work_dir "$T/plain/work" >"$T/plain.log" 2>&1 || { tail -30 "$T/plain.log"; fail "plain dj-process run failed"; }
python3 - "$T/plain/out.jsonl" "$T/job/merged.jsonl" <<'PY'
import json, os, sys
def rows(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if not f.startswith((".", "_")))
    out = {}
    for p in files:
        for line in open(p, encoding="utf-8"):
            r = json.loads(line)
            out[r["id"]] = r
    return out
plain, ours = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(plain) == sorted(ours) == list(range(10, 22)), (sorted(plain), sorted(ours))
for i in plain:
    assert plain[i]["text"] == ours[i]["text"], (plain[i], ours[i])
print("merged output has the same", len(ours), "records as one plain dj-process run")
PY
[ -z "$(ray_procs)" ] || { ray_procs; fail "Ray processes left behind"; }
pass "real Data-Juicer end to end"
