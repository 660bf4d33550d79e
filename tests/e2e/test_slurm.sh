#!/bin/bash
# scripts/slurm-eshard.sbatch on a real single-node Slurm started by this test (munged,
# slurmctld and slurmd with a private configuration, ports and state under $T). Installs
# slurm-wlm and munge when they are missing.
#   - sbatch --wait: the job passes, the run id defaults to SLURM_JOB_ID, the output equals a
#     single-process run;
#   - bad input: the batch job exits 2;
#   - scancel while a shard runs: the rank stops (SIGTERM through srun), releases its lock, the
#     attempt is preempted; a resubmission completes the job under its own run id.
# The daemons are stopped on every exit, failure included.
. "$(dirname "$0")/lib.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID SLURM_CONF
SBATCH_SCRIPT=$SRC/scripts/slurm-eshard.sbatch

bash -n "$SBATCH_SCRIPT" || fail "bash -n $SBATCH_SCRIPT"
pass "bash -n slurm-eshard.sbatch"

[ "$(id -u)" = 0 ] || fail "this test starts munged and the Slurm daemons and needs root"
# ---- install what is missing (the packages scripts/install-deps.sh should carry)
need=0
for c in munged munge slurmctld slurmd sbatch scancel scontrol sinfo; do command -v "$c" >/dev/null || need=1; done
if [ "$need" = 1 ]; then
  echo "installing slurm-wlm munge" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq slurm-wlm munge >"$T/apt.log" 2>&1 ||
    { apt-get update -qq >>"$T/apt.log" 2>&1 && apt-get install -y -qq slurm-wlm munge >>"$T/apt.log" 2>&1; } ||
    { tail -20 "$T/apt.log" >&2; fail "cannot install slurm-wlm munge"; }
fi

# ---- start munged, slurmctld and slurmd; stop them on exit
S=$T/slurm
mkdir -p "$S/ctld" "$S/spool" "$S/log"
chmod 755 "$T" "$S" # munged wants every folder above its socket searchable
PIDS=()
stop_daemons() {
  local p i
  if [ -n "${SLURM_CONF:-}" ] && [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    # shellcheck disable=SC2046
    scancel --full $(squeue -h -o %i) 2>/dev/null || true
    for i in $(seq 1 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  # slurmd, slurmctld, munged: in the reverse order of their start.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap 'stop_daemons; test_done' EXIT

dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$S/munge.key"
munged -F --force --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
  --log-file="$S/log/munged.log" --seed-file="$S/munged.seed" >"$S/log/munged.out" 2>&1 &
PIDS+=($!)
for i in $(seq 1 50); do [ -S "$S/munge.sock" ] && break; sleep 0.1; done
munge -S "$S/munge.sock" -n | unmunge -S "$S/munge.sock" >/dev/null || { cat "$S/log/munged.out"; fail "munged does not work"; }

read -r CTLD_PORT SLURMD_PORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
HOST=$(hostname)
FIRST_ID=$((RANDOM % 5000 + 1000)) # job ids that no other test run would use
cat >"$S/slurm.conf" <<EOF
ClusterName=eshardtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge.sock
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
FirstJobId=$FIRST_ID
KillWait=10
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$S/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >"$S/log/slurmd.out" 2>&1 &
PIDS+=($!)
state=
for i in $(seq 1 60); do
  state=$(sinfo -h -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || { tail -20 "$S"/log/*; fail "the Slurm node is not idle after 30 s (state: $state)"; }
pass "single-node Slurm up (ports $CTLD_PORT/$SLURMD_PORT)"

# ---- the data, the processor and a single-process reference
write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(120):
        f.write(json.dumps({"id": i, "text": "slurm row %d " % i + "s" * (i % 29)}) + "\n")
PY
F=$T/flags
mkdir -p "$F"
cat >"$T/proc.sh" <<EOF
#!/bin/sh
: >"$F/started.\$3"
if [ -e "$F/slow" ]; then sleep 60; fi
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 4 --process-cmd "$T/proc.sh {input} {output} {shard_id}")
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"
rm -f "$F"/started.*

# submit ARGS...: sbatch the launcher (output to $T/slurm-<id>.out); prints the job id.
submit() {
  sbatch --parsable --chdir="$T" -o "$T/slurm-%j.out" --export="ALL,ESHARD_BIN=$BIN" "$@" | cut -d';' -f1
}
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
run_ids() {
  python3 - "$1" <<'PY'
import glob, json, sys
print(" ".join(sorted({json.load(open(f)).get("run_id", "") for f in glob.glob(sys.argv[1] + "/state/done/*.json")})))
PY
}

# ---- sbatch --wait: passes, run id = SLURM_JOB_ID
got=0
timeout 120 sbatch --wait --parsable --chdir="$T" -o "$T/slurm-%j.out" --export="ALL,ESHARD_BIN=$BIN" \
  "$SBATCH_SCRIPT" "${COMMON[@]}" --job-dir "$T/job" >"$T/sbatch.out" 2>"$T/sbatch.err" || got=$?
id=$(cut -d';' -f1 <"$T/sbatch.out")
[ "$got" = 0 ] || { cat "$T/sbatch.err" "$T/slurm-$id.out" 2>/dev/null; fail "sbatch --wait exited $got"; }
grep -q '^PASS: 4 shards were completed by 1 node(s); merged 120 rows' "$T/slurm-$id.out" ||
  { cat "$T/slurm-$id.out"; fail "no PASS line in the job output"; }
grep -q "^eshard-mpi run $id on 1 rank(s), 1 host(s)" "$T/slurm-$id.out" || { cat "$T/slurm-$id.out"; fail "the run id is not the Slurm job id $id"; }
[ "$(run_ids "$T/job")" = "$id" ] || fail "done records carry run ids '$(run_ids "$T/job")', expected $id"
cmp "$T/ref.jsonl" "$T/job/merged.jsonl" || fail "the Slurm job's output differs from a single-process run"
[ "$(job_state "$id")" = COMPLETED ] || fail "job $id ended $(job_state "$id")"
pass "sbatch --wait slurm-eshard.sbatch: PASS, run id = SLURM_JOB_ID ($id)"

# ---- bad input: the batch job exits 2
printf '{"id": 1}\n\n' >"$T/bad.jsonl"
got=0
timeout 120 sbatch --wait --parsable --chdir="$T" -o "$T/slurm-%j.out" --export="ALL,ESHARD_BIN=$BIN" \
  "$SBATCH_SCRIPT" --config "$T/recipe.yaml" --dataset-path "$T/bad.jsonl" --num-shards 1 \
  --process-cmd "$T/proc.sh {input} {output} {shard_id}" --job-dir "$T/badjob" >"$T/sbatch.out" 2>"$T/sbatch.err" || got=$?
id=$(cut -d';' -f1 <"$T/sbatch.out")
[ "$got" = 2 ] || { cat "$T/slurm-$id.out" 2>/dev/null; fail "sbatch --wait on bad input exited $got, expected 2"; }
grep -q "Blank JSONL record at $T/bad.jsonl:2" "$T/slurm-$id.out" || { cat "$T/slurm-$id.out"; fail "no bad-input message"; }
pass "bad input: the batch job exits 2"

# ---- scancel while a shard runs: the claim is released; a resubmission completes the job
rm -f "$F"/started.*
touch "$F/slow"
id=$(submit "$SBATCH_SCRIPT" "${COMMON[@]}" --job-dir "$T/cancel")
[ -n "$id" ] || fail "sbatch printed no job id"
started() { compgen -G "$F/started.*" >/dev/null; }
for i in $(seq 1 300); do started && break; sleep 0.1; done
started || { cat "$T/slurm-$id.out"; fail "the first shard did not start within 30 s"; }
scancel "$id"
for i in $(seq 1 300); do
  case "$(job_state "$id")" in PENDING|RUNNING|COMPLETING|SUSPENDED) sleep 0.1 ;; *) break ;; esac
done
[ "$(job_state "$id")" = CANCELLED ] || fail "job $id is $(job_state "$id") after scancel"
for i in $(seq 1 100); do grep -q 'stopped by SIGTERM' "$T/slurm-$id.out" && break; sleep 0.1; done
grep -q 'stopped by SIGTERM; its claims were released' "$T/slurm-$id.out" || { cat "$T/slurm-$id.out"; fail "the rank did not stop on SIGTERM"; }
[ -z "$(running_locks "$T/cancel")" ] || fail "running locks left after scancel: $(running_locks "$T/cancel")"
python3 - "$T/cancel" <<'PY' || fail "the cancelled attempt is not recorded as preempted"
import glob, json, sys
st = [json.load(open(p)).get("status") for p in glob.glob(sys.argv[1] + "/attempts/*/*/attempt.json")]
ok = st and all(s == "preempted" for s in st)
if not ok:
    print("attempt statuses:", st, file=sys.stderr)
    for p in glob.glob(sys.argv[1] + "/attempts/*/*/attempt.json"):
        print(open(p).read(), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
for i in $(seq 1 50); do pgrep -f "$T/proc.sh" >/dev/null || break; sleep 0.1; done
! pgrep -f "$T/proc.sh" >/dev/null || fail "a processor outlived the cancelled job"
rm -f "$F/slow"
got=0
timeout 120 sbatch --wait --parsable --chdir="$T" -o "$T/slurm-%j.out" --export="ALL,ESHARD_BIN=$BIN" \
  "$SBATCH_SCRIPT" "${COMMON[@]}" --job-dir "$T/cancel" >"$T/sbatch.out" 2>"$T/sbatch.err" || got=$?
id2=$(cut -d';' -f1 <"$T/sbatch.out")
[ "$got" = 0 ] || { cat "$T/slurm-$id2.out"; fail "the resubmission exited $got"; }
[ "$(run_ids "$T/cancel")" = "$id2" ] || fail "done records carry run ids '$(run_ids "$T/cancel")', expected $id2"
cmp "$T/ref.jsonl" "$T/cancel/merged.jsonl" || fail "output after scancel + resubmission differs"
pass "scancel releases the claim (attempt preempted); the resubmission $id2 completes the job"
