#!/usr/bin/env bash
# --ray-mode per-rank with real Data-Juicer: each rank starts one node-local Ray head and gives
# its address to every shard; no Ray process is left after the job, after a failure, or after
# SIGTERM.
. "$(dirname "$0")/lib_dj.sh"
cd "$SRC"
our_ray() { mine 'eshard-ray-|dj_runner.py serve'; }

run_expect 0 "$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config configs/demo.yaml --dataset-path configs/demo-data \
  --job-dir "$T/job" --num-shards 4 --python "$PY" --dj-process "$DJ" --ray-mode per-rank
expect_out "PASS: 4 shards were completed by 1 node(s); merged 55 rows into $T/job/merged.jsonl"
[ "$(grep -c 'Started a node-local Ray head at' "$T/out")" = 2 ] || fail "expected one head per rank"
python3 - "$T/job" <<'PY'
import json, os, re, sys
job = sys.argv[1]
addrs = set()
for f in sorted(os.listdir(os.path.join(job, "state/done"))):
    d = json.load(open(os.path.join(job, "state/done", f)))
    assert re.fullmatch(r"[0-9.]+:\d+", d["ray_address"]), d["ray_address"]
    addrs.add(d["ray_address"])
    log = open(os.path.join(job, os.path.dirname(d["output_path"]), "process.log")).read()
    assert "Connected to Ray cluster" in log or d["ray_address"] in log, "shard did not use the rank's head"
    assert "dj_runner: reusing the Ray connection to " + d["ray_address"] in log, "shard did not run in the rank's persistent runner"
assert 1 <= len(addrs) <= 2, addrs
print("every shard ran in its rank's runner against its rank's head:", sorted(addrs))
PY
grep -q 'Started the persistent Data-Juicer runner' "$T/out" || fail "no persistent runner was started"

# The runner's output equals one plain dj-process run of the same recipe over the whole input.
"$DJ" --config configs/demo.yaml --dataset_path "$SRC/configs/demo-data" --export_path "$T/plain/out.jsonl" \
  --work_dir "$T/plain/work" >"$T/plain.log" 2>&1 || { tail -30 "$T/plain.log"; fail "plain dj-process run failed"; }
python3 - "$T/plain/out.jsonl" "$T/job/merged.jsonl" <<'PY'
import json, os, sys
def rows(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if not f.startswith((".", "_")))
    return {r["id"]: r for p in files for r in map(json.loads, open(p, encoding="utf-8"))}
plain, ours = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(plain) == sorted(ours) and len(ours) == 55, (len(plain), len(ours))
assert all(plain[i]["text"] == ours[i]["text"] for i in plain)
print("per-rank output equals one plain dj-process run:", len(ours), "records")
PY
[ -z "$(our_ray)" ] || { our_ray; fail "Ray processes left after the job"; }
pass "per-rank heads used and stopped"

# SIGTERM while the ranks work: heads stopped, every rank exits 143, locks released.
"$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config configs/demo.yaml --dataset-path configs/demo-data \
  --job-dir "$T/job2" --num-shards 4 --python "$PY" --dj-process "$DJ" --ray-mode per-rank >"$T/out2" 2>&1 &
mpi=$!
wait_for 60 grep -q 'Started a node-local Ray head' "$T/out2"
# A shard is running (its attempt folder has its log) when the signal comes.
wait_for 60 compgen -G "$T/job2/attempts/*/*/process.log"
kill -TERM "$mpi"
rc=0; wait "$mpi" || rc=$?
[ "$rc" != 0 ] || fail "mpirun exited 0 after SIGTERM"
# The heads stop on their own after the ranks: poll until none is left (a leftover head makes
# the wait time out).
no_ray_left() { [ -z "$(our_ray)" ]; }
wait_for 30 no_ray_left
[ -z "$(running_locks "$T/job2")" ] || fail "running locks left after SIGTERM: $(running_locks "$T/job2")"
pass "SIGTERM: heads stopped, locks released (mpirun exit $rc)"
