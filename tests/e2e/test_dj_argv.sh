#!/bin/bash
# The Data-Juicer processor's argv, environment and cwd (docs/design.md#running-a-processor,
# docs/design.md#reference-tests 7, and docs/design.md#a-clean-child-environment), with a fake
# Data-Juicer that records what it got and writes its export as a folder of 2 part files plus
# "_SUCCESS" (not JSON). Three ways to name Data-Juicer: dj-process on PATH (the default),
# --dj-process CMD, and --dj-root DIR (python3 DIR/tools/process_data.py).
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(12):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY

# The fake: records argv, environment, cwd and what existed at its start in A/fake.json, then
# splits its input into two part files under the export folder.
mkdir -p "$T/bin" "$T/djroot/tools"
cat >"$T/fake-dj" <<'PY'
#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
opt = dict(zip(args[0::2], args[1::2]))
exp = opt["--export_path"]
A = os.path.dirname(exp)
work = os.path.join(opt["--work_dir"], opt["--job_id"])
with open(os.path.join(A, "fake.json"), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "work_exists": os.path.isdir(work), "stdin_tty": os.isatty(0)}, f)
lines = open(opt["--dataset_path"], "rb").read().splitlines(True)
os.makedirs(exp)
half = len(lines) // 2
open(os.path.join(exp, "part-00000.jsonl"), "wb").writelines(lines[:half])
open(os.path.join(exp, "part-00001.jsonl"), "wb").writelines(lines[half:])
open(os.path.join(exp, "_SUCCESS"), "w").write("not json\n")
print("fake Data-Juicer done")
PY
chmod +x "$T/fake-dj"
cp "$T/fake-dj" "$T/bin/dj-process"
cp "$T/fake-dj" "$T/djroot/tools/process_data.py"
export PATH="$T/bin:$PATH"

# The launcher identity a worker started by mpirun, Slurm, torchrun or PAI-DLC would carry.
LAUNCHER_ENV=(OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 PMIX_RANK=1 PMI_RANK=1 SLURM_PROCID=1
  SLURM_NTASKS=2 SLURM_JOB_ID=77 RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=10.0.0.1
  PAI_JOB_ID=dlc-1 DLC_JOB_ID=dlc-1 JOB_ID=j1 DJ_ELASTIC_RUN_ID=r1 RAY_ADDRESS=10.9.9.9:6379
  DJ_PRODUCED_DATA_DIR=/wrong ESHARD_KEEP_ME=yes)

# check_attempt JOB SHARD_INDEX RAY_ADDRESS MODE [EXPECT_CWD]: the done record, the processed
# output and what the fake recorded. MODE: path | cmd | root.
check_attempt() {
  python3 - "$@" <<'PY'
import hashlib, json, os, sys
job, k, addr, mode = sys.argv[1:5]
cwd_want = sys.argv[5] if len(sys.argv) > 5 else None
man = json.load(open(os.path.join(job, "manifest.json")))
sh = man["shards"][int(k)]
sid = sh["id"]
d = json.load(open(os.path.join(job, "state/done", sid + ".json")))
assert d["status"] == "done", d
assert d["rows"] == sh["rows"], (d["rows"], sh["rows"])
assert d["executor_type"] == "ray" and d["ray_address"] == addr, d
out = os.path.join(job, d["output_path"])
A = os.path.dirname(out)
rel = os.path.relpath(A, job)
shard_bytes = open(os.path.join(job, sh["path"]), "rb").read()
assert open(out, "rb").read() == shard_bytes, "processed.jsonl differs from the shard"
assert d["sha256"] == hashlib.sha256(shard_bytes).hexdigest()
files = d["ray_output_files"]
assert [f["path"] for f in files] == [rel + "/ray-output.jsonl/part-00000.jsonl",
                                      rel + "/ray-output.jsonl/part-00001.jsonl"], files
assert sum(f["rows"] for f in files) == sh["rows"], files
fence = json.load(open(os.path.join(job, "state/locks", sid + ".lock")))
assert fence["status"] == "done" and fence["terminal_path"] == "state/done/" + sid + ".json", fence
assert fence["token"] == d["token"], (fence, d)
a = json.load(open(os.path.join(A, "attempt.json")))
assert a["status"] == "done" and a["return_code"] == 0, a
f = json.load(open(os.path.join(A, "fake.json")))
argv, env = f["argv"], f["env"]
tok = d["token"]
J = os.path.realpath(job)
tail = ["--config", J + "/recipe.yaml",
        "--dataset_path", J + "/shards/" + sid + ".jsonl",
        "--export_path", A + "/ray-output.jsonl",
        "--executor_type", "ray",
        "--ray_address", addr,
        "--work_dir", A + "/work",
        "--job_id", "%s_%s_%s" % (man["job_id"], sid, tok[:12]),
        "--event_log_dir", A + "/logs",
        "--checkpoint_dir", A + "/checkpoints",
        "--partition_dir", A + "/partitions"]
if mode == "path":
    head = ["dj-process"]
elif mode == "cmd":
    head = ["python3", os.environ["T"] + "/fake-dj"]
else:
    head = ["python3", os.environ["T"] + "/djroot/tools/process_data.py"]
# attempt.json's command is the argv handed to exec; the fake (a Python script) sees its own
# path as argv[0] and the options after it.
assert a["command"] == head + tail, ("command", a["command"], head + tail)
assert argv[1:] == tail, ("argv", argv[1:], tail)
script = {"path": os.environ["T"] + "/bin/dj-process", "cmd": os.environ["T"] + "/fake-dj",
          "root": os.environ["T"] + "/djroot/tools/process_data.py"}[mode]
assert os.path.realpath(argv[0]) == os.path.realpath(script), (argv[0], script)
assert f["work_exists"], "A/work/<job_id>_<shard>_<token12> was not made before the start"
assert not f["stdin_tty"]
# Environment.
assert env.get("DJ_ELASTIC_SHARD_CHILD") == "1", env.get("DJ_ELASTIC_SHARD_CHILD")
assert env.get("DJ_PRODUCED_DATA_DIR") == A + "/produced", env.get("DJ_PRODUCED_DATA_DIR")
for k in env:
    assert not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "MASTER_")), k
    assert k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID",
                     "DJ_ELASTIC_RUN_ID"), k
if addr == "local":
    assert "RAY_ADDRESS" not in env, env.get("RAY_ADDRESS")
else:
    assert env.get("RAY_ADDRESS") == addr, env.get("RAY_ADDRESS")
assert env.get("ESHARD_KEEP_ME") == "yes", "an ordinary variable was dropped"
want_xdg = os.environ.get("WANT_XDG", J + "/cache")
want_hf = os.environ.get("WANT_HF", want_xdg + "/huggingface")
assert env.get("XDG_CACHE_HOME") == want_xdg, env.get("XDG_CACHE_HOME")
assert env.get("HF_HOME") == want_hf, env.get("HF_HOME")
if mode == "root":
    pp = env.get("PYTHONPATH", "").split(":")
    assert pp[0] == os.path.realpath(os.environ["T"] + "/djroot"), pp
    assert pp[1:] == ["/old/site"], pp
    assert f["cwd"] == os.path.realpath(os.environ["T"] + "/djroot"), f["cwd"]
else:
    assert env.get("PYTHONPATH") == "/old/site", env.get("PYTHONPATH")
    assert f["cwd"] == cwd_want, (f["cwd"], cwd_want)
print("ok", sid, mode, addr)
PY
}
export T

# ==== 1. dj-process on PATH (the default), with the launcher identity in the worker's
# environment and HF_HOME / XDG_CACHE_HOME unset.
J=$T/job
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 3 --no-keep-order
[ "$(json_get "$J/manifest.json" '.get("processor", {}).get("type", "data_juicer")')" != command ] || fail "prepare chose a command processor"
[ "$(json_get "$J/manifest.json" '["execution"]["ray_address"]')" = local ] || fail "manifest ray_address"
# Workers run in their own folder, which a command child (without --dj-root) starts in.
mkdir -p "$T/wd"
cd "$T/wd"
run_expect 0 env -u HF_HOME -u XDG_CACHE_HOME "${LAUNCHER_ENV[@]}" PYTHONPATH=/old/site \
    "$BIN" worker --ray-mode per-attempt --job-dir "$J" --max-shards 1
check_attempt "$J" 0 local path "$(realpath "$T/wd")" || fail "dj-process on PATH"
pass "dj-process on PATH: argv, environment, done record"

# ==== 2. --ray-address auto on the worker: argv, RAY_ADDRESS and the done record say auto;
# XDG_CACHE_HOME set by the user is kept and HF_HOME follows it.
run_expect 0 env -u HF_HOME XDG_CACHE_HOME="$T/xdg" "${LAUNCHER_ENV[@]}" PYTHONPATH=/old/site \
    "$BIN" worker --ray-mode per-attempt --job-dir "$J" --max-shards 1 --ray-address auto
WANT_XDG=$T/xdg check_attempt "$J" 1 auto path "$(realpath "$T/wd")" || fail "--ray-address auto"
# HF_HOME set by the user is kept as it is.
run_expect 0 env HF_HOME="$T/hf" XDG_CACHE_HOME="$T/xdg" "${LAUNCHER_ENV[@]}" PYTHONPATH=/old/site \
    "$BIN" worker --ray-mode per-attempt --job-dir "$J" --max-shards 1
WANT_XDG=$T/xdg WANT_HF=$T/hf check_attempt "$J" 2 local path "$(realpath "$T/wd")" || fail "HF_HOME kept"
run_expect 0 "$BIN" status --job-dir "$J"
pass "--ray-address auto and user cache folders"

# ==== 3. --dj-process CMD, split on blanks.
J=$T/job-cmd
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 1 --no-keep-order \
  --dj-process "python3  $T/fake-dj"
run_expect 0 env -u HF_HOME -u XDG_CACHE_HOME "${LAUNCHER_ENV[@]}" PYTHONPATH=/old/site \
    "$BIN" worker --ray-mode per-attempt --job-dir "$J"
check_attempt "$J" 0 local cmd "$(realpath "$T/wd")" || fail "--dj-process"
pass "--dj-process CMD"

# ==== 4. --dj-root DIR: python3 DIR/tools/process_data.py, DIR first on PYTHONPATH, cwd DIR.
J=$T/job-root
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 1 --no-keep-order \
  --dj-root "$T/djroot"
run_expect 0 env -u HF_HOME -u XDG_CACHE_HOME "${LAUNCHER_ENV[@]}" PYTHONPATH=/old/site \
    "$BIN" worker --ray-mode per-attempt --job-dir "$J"
check_attempt "$J" 0 local root || fail "--dj-root"
pass "--dj-root DIR"

# ==== 5. A Data-Juicer that exits 0 without an export: the reference's message.
cat >"$T/bin/dj-process" <<'EOF'
#!/bin/sh
echo "nothing to do"
EOF
J=$T/job-none
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 1 --no-keep-order
run_expect 2 "$BIN" worker --ray-mode per-attempt --job-dir "$J" --max-shards 1
A=$(ls -d "$J"/attempts/*/0001-*)
[ "$(json_get "$A/attempt.json" '["error"]')" = "Data-Juicer returned 0 but did not create $A/ray-output.jsonl" ] \
  || fail "missing export: $(json_get "$A/attempt.json" '["error"]')"
grep -q "nothing to do" "$A/process.log" || fail "process.log lacks the child's stdout"
# And one that fails: "Data-Juicer returned exit code N".
printf '#!/bin/sh\nexit 4\n' >"$T/bin/dj-process"
run_expect 2 "$BIN" worker --ray-mode per-attempt --job-dir "$J" --max-shards 1
A=$(ls -d "$J"/attempts/*/0002-*)
[ "$(json_get "$A/attempt.json" '["error"]')" = "Data-Juicer returned exit code 4" ] || fail "exit code message"
pass "Data-Juicer failure messages"
