#!/bin/bash
# A resubmission takes corrected node-local options (README "Commands": what a resubmission
# must repeat): a job prepared without --python runs when `run` (under mpirun) or `worker` is
# given --python, --dj-process or --ray-address, which override the manifest for that process
# only (the manifest stays byte for byte as prepared); an error caused by a missing --python
# names it; a resubmission with another recipe, shard count or dataset is refused (exit 2) with
# the old and new values.
#
# Ray and Data-Juicer are fakes: $T/venv/bin/ray starts a "head" (a gcs_server that listens on
# the head's port and a raylet, as es_ray_head_alive() checks), and the dj-process fakes copy
# their shard to the export path and log which of them ran with which Ray address.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

# No real `ray` on PATH: the one beside the given python must be what is found.
path=
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do [ -x "$d/ray" ] || path=${path:+$path:}$d; done
export PATH=$path

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
PY3=$(python3 -c 'import sys; print(sys.executable)')

# The node's "venv": a python (the real one), a fake ray and a fake dj-process; a second fake
# dj-process on PATH (the default), telling the two apart in $T/dj.log.
mkdir -p "$T/venv/bin" "$T/bin"
ln -s "$PY3" "$T/venv/bin/python"
cat >"$T/venv/bin/ray" <<PY
#!$PY3
import os, socket, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open("$T/ray.log", "a") as f:
    f.write(" ".join(sys.argv[1:3]) + "\n")
if sys.argv[1:2] != ["start"]:
    sys.exit(0)
opt = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--") and "=" in a)
port = int(opt["port"])
null = open(os.devnull, "r+b")
for name in ("gcs_server", "raylet"):
    subprocess.Popen([os.path.join(here, name), str(port)], stdin=null, stdout=null, stderr=null)
for _ in range(400):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        break
    except OSError:
        time.sleep(0.05)
with open(os.path.join(opt["temp-dir"], "ray_current_cluster"), "w") as f:
    f.write("127.0.0.1:%d\n" % port)
PY
cat >"$T/venv/bin/gcs_server" <<PY
#!$PY3
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    s.accept()[0].close()
PY
cat >"$T/venv/bin/raylet" <<PY
#!$PY3
import time
while True:
    time.sleep(60)
PY
cat >"$T/venv/bin/dj-process" <<PY
#!$PY3
import os, shutil, sys
opt = dict(zip(sys.argv[1::2], sys.argv[2::2]))
with open("$T/dj.log", "a") as f:
    f.write("%s %s\n" % (os.path.basename(os.path.dirname(os.path.dirname(sys.argv[0]))), opt["--ray_address"]))
shutil.copyfile(opt["--dataset_path"], opt["--export_path"])
PY
sed 's/os.path.basename(os.path.dirname(os.path.dirname(sys.argv\[0\])))/"path"/' "$T/venv/bin/dj-process" >"$T/bin/dj-process"
chmod +x "$T/venv/bin/"* "$T/bin/dj-process"
export PATH="$T/bin:$PATH"
command -v ray >/dev/null && fail "a ray command is on PATH: $(command -v ray)"

IN=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl")
VENV_PY=$T/venv/bin/python
# done_addresses JOB: the distinct ray_address of its done records.
done_addresses() { python3 -c '
import glob, json, sys
print(" ".join(sorted({json.load(open(p))["ray_address"] for p in glob.glob(sys.argv[1] + "/state/done/*.json")})))' "$1"; }
# head_address: the fake head's address, as the per-rank worker gives it to every shard.
head_re='127\.0\.0\.1:[0-9]+'

# ---- 1. prepare without --python; run without it: the error names --python.
J=$T/job
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J" --num-shards 4
cp "$J/manifest.json" "$T/manifest.saved"
run_expect 2 timeout 100 "$MPIRUN" -np 1 "$BIN" run "${IN[@]}" --job-dir "$J" --num-shards 4 --no-dj-runner
expect_out "Job is already prepared and unchanged: $J"
expect_err "cannot find Ray's 'ray' command"
expect_err "--python"
[ -z "$(ls "$J/state/done")" ] || fail "shards were done without Ray"
pass "no ray: the error names --python"

# ---- 2. the same run with --python: the ray beside it starts the head; the manifest is unchanged.
: >"$T/dj.log"
run_expect 0 timeout 100 "$MPIRUN" -np 1 "$BIN" run "${IN[@]}" --job-dir "$J" --num-shards 4 --no-dj-runner \
  --python "$VENV_PY"
expect_out "Job is already prepared and unchanged: $J"
expect_out "its manifest keeps --python not set (given: $VENV_PY)"
grep -q '^start --head' "$T/ray.log" || fail "the ray beside --python was not started: $(cat "$T/ray.log")"
[[ $(done_addresses "$J") =~ ^$head_re$ ]] || fail "done records' Ray address: $(done_addresses "$J")"
[ "$(grep -cE "^path $head_re$" "$T/dj.log")" = 4 ] || fail "dj-process runs: $(cat "$T/dj.log")"
cmp "$T/manifest.saved" "$J/manifest.json" || fail "run --python changed the manifest"
[ "$(wc -l <"$J/merged.jsonl")" = 8 ] || fail "merged output has $(wc -l <"$J/merged.jsonl") rows"
pass "run --python overrides the job's (unset) python; manifest unchanged"

# ---- 3. standalone prepare with --python: unchanged, and it says the manifest keeps its own.
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J" --num-shards 4 --python "$VENV_PY" --ray-address auto
expect_out "Job is already prepared and unchanged: $J"
expect_out "its manifest keeps --python not set (given: $VENV_PY); --ray-address local (given: auto)"
cmp "$T/manifest.saved" "$J/manifest.json" || fail "prepare --python changed the manifest"
pass "prepare with other node-local options: a no-op that says so"

# ---- 4. worker --python --dj-process, then run --dj-process, on a job prepared with a
# dj-process that this node does not have.
J2=$T/job2
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J2" --num-shards 4 --dj-process /nonexistent/bin/dj-process
cp "$J2/manifest.json" "$T/manifest2.saved"
# Without the override the recorded dj-process is missing here: the error names the options.
run_expect 2 "$BIN" worker --job-dir "$J2" --ray-mode per-attempt --progress-secs 0
# The worker checks it at its start, before it claims anything.
expect_err "--dj-process: program '/nonexistent/bin/dj-process' does not exist on $(hostname); give this node's with --python, --dj-process or --dj-root, or install it"
[ ! -e "$J2/attempts" ] || [ -z "$(ls -A "$J2/attempts")" ] || fail "a worker without the program claimed a shard"
: >"$T/dj.log"
: >"$T/ray.log"
run_expect 0 "$BIN" worker --job-dir "$J2" --max-shards 2 --no-dj-runner --progress-secs 0 \
  --python "$VENV_PY" --dj-process "$T/venv/bin/dj-process"
[ "$(grep -cE "^venv $head_re$" "$T/dj.log")" = 2 ] || fail "worker --dj-process runs: $(cat "$T/dj.log")"
grep -q '^start --head' "$T/ray.log" || fail "worker --python: the ray beside it was not started"
[ "$(ls "$J2/state/done" | wc -l)" = 2 ] || fail "worker: $(ls "$J2/state/done" | wc -l) done records, expected 2"
cmp "$T/manifest2.saved" "$J2/manifest.json" || fail "worker --python --dj-process changed the manifest"
run_expect 0 timeout 100 "$MPIRUN" -np 1 "$BIN" run "${IN[@]}" --job-dir "$J2" --num-shards 4 --no-dj-runner \
  --dj-process "$T/venv/bin/dj-process"
expect_out "Job is already prepared and unchanged: $J2"
[ "$(grep -cE "^venv $head_re$" "$T/dj.log")" = 4 ] || fail "run --dj-process runs: $(cat "$T/dj.log")"
cmp "$T/manifest2.saved" "$J2/manifest.json" || fail "run --dj-process changed the manifest"
[ "$(wc -l <"$J2/merged.jsonl")" = 8 ] || fail "job2: merged output has $(wc -l <"$J2/merged.jsonl") rows"
pass "worker --python --dj-process and run --dj-process override the manifest's dj-process"

# ---- 5. --ray-address: a worker's own (a cluster address: per-attempt), then a run's "local"
# (per-rank) on a job prepared for a cluster.
J3=$T/job3
run_expect 0 "$BIN" prepare "${IN[@]}" --job-dir "$J3" --num-shards 4 --ray-address 127.0.0.1:1
cp "$J3/manifest.json" "$T/manifest3.saved"
: >"$T/dj.log"
run_expect 0 "$BIN" worker --job-dir "$J3" --max-shards 1 --progress-secs 0 --ray-address auto
[ "$(cat "$T/dj.log")" = "path auto" ] || fail "worker --ray-address auto: $(cat "$T/dj.log")"
run_expect 0 timeout 100 "$MPIRUN" -np 1 "$BIN" run "${IN[@]}" --job-dir "$J3" --num-shards 4 --no-dj-runner \
  --ray-address local --python "$VENV_PY"
expect_out "Job is already prepared and unchanged: $J3"
[ "$(grep -cE "^path $head_re$" "$T/dj.log")" = 3 ] || fail "run --ray-address local: $(cat "$T/dj.log")"
cmp "$T/manifest3.saved" "$J3/manifest.json" || fail "run --ray-address changed the manifest"
pass "worker and run --ray-address override the job's"

# ---- 6. What changes results is refused, naming the old and new values; nothing is written.
cp "$T/recipe.yaml" "$T/recipe2.yaml"
echo "# another recipe" >>"$T/recipe2.yaml"
old_sha=$(sha256sum "$T/recipe.yaml" | cut -d' ' -f1)
new_sha=$(sha256sum "$T/recipe2.yaml" | cut -d' ' -f1)
run_expect 2 timeout 100 "$MPIRUN" -np 1 "$BIN" run --config "$T/recipe2.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$J" --num-shards 3 --python "$VENV_PY"
expect_err "Job directory already exists and does not match this request: $J was prepared with recipe sha256 $old_sha (now $new_sha); 4 shards (now 3). Choose a new --job-dir"
cp "$T/in.jsonl" "$T/in2.jsonl"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in2.jsonl" --job-dir "$J" --num-shards 4
expect_err "was prepared with dataset path $T/in.jsonl (now $T/in2.jsonl); input file $T/in.jsonl (now $T/in2.jsonl)."
run_expect 2 "$BIN" prepare "${IN[@]}" --job-dir "$J" --num-shards 4 --process-cmd 'cp {input} {output}'
expect_err "was prepared with processor Data-Juicer (now --process-cmd 'cp {input} {output}'); --keep-order (now --no-keep-order)."
cmp "$T/manifest.saved" "$J/manifest.json" || fail "a refused resubmission changed the manifest"
pass "another recipe, shard count, dataset or processor is refused with the old and new values"
