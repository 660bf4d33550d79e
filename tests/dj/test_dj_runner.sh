#!/usr/bin/env bash
# The persistent per-rank Data-Juicer runner (the default mode) with real Data-Juicer and Ray:
# 55 tiny shards through one runner give the rows of one plain dj-process run over the whole
# input, in input order; the runner's RSS (sampled from /proc/<pid>/status at shard 10 and 50)
# grows by at most 10%; state a run leaves in the driver (tempfile's folder, datasets caching,
# the driver's MODEL_ZOO, global_cfg) does not reach the next shard; an operator that ends
# the runner's Python process fails only its attempt and a new runner serves the next shards;
# an operator that raises fails only its attempt.
. "$(dirname "$0")/lib_dj.sh"
OPS=$SRC/tests/dj/custom_ops/eshard_fault_ops.py
mkdir -p "$T/in"
python3 - "$T/in/rows.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(110):
        # equal line lengths (byte-balanced shards of 2 rows); every 7th row is too short for the filter
        if i % 7 == 3:
            rec = {"id": i, "text": "tiny %03d" % i, "pad": "x" * 27}
        else:
            rec = {"id": i, "text": "row %03d  has   plenty of  text\tto keep" % i, "pad": ""}
        f.write(json.dumps(rec) + "\n")
PY
cat >"$T/recipe.yaml" <<YAML
project_name: eshard-runner-test
executor_type: ray
ray_address: local
text_keys: text
np: 1
custom_operator_paths: ['$OPS']
process:
  - eshard_test_state_probe_mapper:
  - whitespace_normalization_mapper:
  - text_length_filter:
      min_len: 20
      max_len: 100000
YAML
cd "$T"
run_expect 0 "$BIN" prepare --config recipe.yaml --dataset-path in --job-dir "$T/job" --num-shards 55 \
  --python "$PY" --dj-process "$DJ"
# The default mode: no --ray-mode.
"$BIN" worker --job-dir "$T/job" >"$T/w.out" 2>&1 &
wpid=$!
# rss_at N: VmRSS in kB of the runner, sampled when N shards are done. It waits as long as the
# worker runs (the worker ends by itself once every shard is done or failed; CTest's timeout
# bounds the whole test), so a loaded machine slows it down without failing it.
rss_at() {
  local want=$1 pid n
  while :; do
    n=$(find "$T/job/state/done" -name '*.json' 2>/dev/null | wc -l)
    if [ "$n" -ge "$want" ]; then
      pid=$(sed -n 's/^Started the persistent Data-Juicer runner (pid \([0-9]*\)).*/\1/p' "$T/w.out" | tail -1)
      [ -n "$pid" ] || fail "no runner pid in the worker's output"
      awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" || fail "runner $pid is gone at $n shards"
      return
    fi
    kill -0 "$wpid" 2>/dev/null || { cat "$T/w.out"; fail "worker ended before $want shards were done"; }
    sleep 0.1
  done
}
rss10=$(rss_at 10)
rss50=$(rss_at 50)
rc=0; wait "$wpid" || rc=$?
[ "$rc" = 0 ] || { tail -40 "$T/w.out"; fail "worker exited $rc"; }
echo "runner RSS: $rss10 kB at shard 10, $rss50 kB at shard 50"
python3 -c "import sys; a, b = int(sys.argv[1]), int(sys.argv[2]); print('growth %.1f%%' % (100.0 * (b - a) / a)); sys.exit(b > a * 1.10)" "$rss10" "$rss50" \
  || fail "runner RSS grew by more than 10% from shard 10 ($rss10 kB) to shard 50 ($rss50 kB)"
[ "$(grep -c 'Started the persistent Data-Juicer runner' "$T/w.out")" = 1 ] || fail "expected exactly one runner for 55 shards"
grep -q 'Started a node-local Ray head' "$T/w.out" || fail "the default mode did not start a per-rank head"
run_expect 0 "$BIN" merge --job-dir "$T/job" --output "$T/job/merged.jsonl"
pass "55 shards through one runner; RSS $rss10 -> $rss50 kB"

python3 - "$T/job" <<'PY'
import json, os, sys
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
pids, tempdirs = set(), set()
for s in m["shards"]:
    d = json.load(open(os.path.join(job, "state/done", s["id"] + ".json")))
    adir = os.path.join(job, os.path.dirname(d["output_path"]))
    log = open(os.path.join(adir, "process.log")).read()
    assert "dj_runner: reusing the Ray connection" in log or "dj_runner: connecting to Ray" in log, s["id"]
    p = json.load(open(os.path.join(adir, "state_probe.json")))
    # What this run began with is the runner's own state, not what the shard before left.
    # (tempfile's own default, the same for every shard; never a folder an earlier shard set)
    assert p["tempdir"] is None or not p["tempdir"].startswith(job), (s["id"], p)
    tempdirs.add(p["tempdir"])
    assert p["caching"] is True, (s["id"], p)
    assert p["zoo"] == [], (s["id"], p)
    assert p["export_path"] == os.path.join(adir, "ray-output.jsonl"), (s["id"], p)
    assert p["built"] == 1, (s["id"], p)
    pids.add(p["pid"])
assert len(pids) == 1 and len(tempdirs) == 1, (pids, tempdirs)
print("state probe: every shard began with the runner's own state, all in one runner (pid %d)" % pids.pop())
PY
pass "no Data-Juicer state leaked between shards"

# One plain dj-process run of the whole input: the same rows, in input order.
"$DJ" --config recipe.yaml --dataset_path "$T/in/rows.jsonl" --export_path "$T/plain/out.jsonl" \
  --work_dir "$T/plain/work" >"$T/plain.log" 2>&1 || { tail -30 "$T/plain.log"; fail "plain dj-process run failed"; }
python3 - "$T/plain/out.jsonl" "$T/job/merged.jsonl" <<'PY'
import json, os, sys
def rows(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if not f.startswith((".", "_")))
    return [json.loads(l) for p in files for l in open(p, encoding="utf-8")]
plain = {r["id"]: r for r in rows(sys.argv[1])}
ours = rows(sys.argv[2])
ids = [r["id"] for r in ours]
want = [i for i in range(110) if i % 7 != 3]
assert sorted(plain) == want, sorted(plain)
assert ids == want, ids  # order-stable output (the default for Data-Juicer): input order
for r in ours:
    assert r == plain[r["id"]], (r, plain[r["id"]])
print("merged output: the", len(ours), "rows of one plain dj-process run, in input order")
PY
pass "per-rank rows equal a plain dj-process run"

# Faults: an operator that ends the runner's process (os._exit while it is built, in the
# driver), then one that raises in a Ray worker. Each fails its own attempt only.
touch "$T/flag.exit" "$T/flag.raise"
cat >"$T/fault.yaml" <<YAML
project_name: eshard-runner-fault
executor_type: ray
ray_address: local
text_keys: text
np: 1
skip_op_error: false
custom_operator_paths: ['$OPS']
process:
  - eshard_test_fault_mapper:
      flag: '$T/flag.exit'
      mode: exit_driver
  - eshard_test_fault_mapper:
      flag: '$T/flag.raise'
      mode: raise
  - text_length_filter:
      min_len: 20
      max_len: 100000
YAML
head -8 "$T/in/rows.jsonl" >"$T/in8.jsonl"
run_expect 0 "$BIN" prepare --config fault.yaml --dataset-path in8.jsonl --job-dir "$T/fjob" --num-shards 4 \
  --python "$PY" --dj-process "$DJ"
run_expect 0 "$BIN" worker --job-dir "$T/fjob"
[ ! -e "$T/flag.exit" ] && [ ! -e "$T/flag.raise" ] || fail "a fault operator did not fire"
[ "$(grep -c 'Started the persistent Data-Juicer runner' "$T/out")" = 2 ] || { cat "$T/out" "$T/err"; fail "expected a second runner after the first died"; }
expect_err "the Data-Juicer runner exited with code 3; starting a new one"
python3 - "$T/fjob" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
atts = sorted(glob.glob(os.path.join(job, "attempts/*/*/attempt.json")))
failed = []
for a in atts:
    j = json.load(open(a))
    if j["status"] != "done":
        log = open(os.path.join(os.path.dirname(a), "process.log"), errors="replace").read()
        failed.append((j["status"], j.get("error"), log))
assert len(failed) == 2, [f[:2] for f in failed]
assert all(st == "failed" for st, _, _ in failed), failed
errs = sorted(e for _, e, _ in failed)
assert errs == ["Data-Juicer returned exit code 1", "Data-Juicer returned exit code 3"], errs
assert any("eshard_test_fault_mapper: raising as asked" in log for _, _, log in failed)
assert any("went away before replying" in log for _, _, log in failed)
m = json.load(open(os.path.join(job, "manifest.json")))
for s in m["shards"]:
    assert os.path.exists(os.path.join(job, "state/done", s["id"] + ".json")), s["id"]
print("two attempts failed (exit 3: runner ended; exit 1: operator raised), every shard done:", len(atts), "attempts")
PY
for pid in $(sed -n 's/^Started the persistent Data-Juicer runner (pid \([0-9]*\)).*/\1/p' "$T/out"); do
  ! kill -0 "$pid" 2>/dev/null || fail "runner $pid outlived its worker"
done
pass "faults fail only their own attempt; the runner is restarted"
