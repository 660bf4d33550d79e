#!/bin/bash
# A shard never runs twice on a shared file system that caches (terminal fences). Every worker
# sees the job folder through its own caching mount (tests/e2e/cachefs.py: attribute, entry and
# negative-entry caches like an NFS client's actimeo and lookupcache=all, locks local to the
# mount), with caches of 3 s and of 30 s, 40 shards of 0.3 s so that many finish inside one
# cache window, and one worker SIGKILLed mid-run:
#   - attempts = shards + the takeovers the kill caused, no superseded attempt;
#   - exactly one done record per shard, whose token is the one attempt that says done;
#   - the merged output equals a run on a plain folder;
#   - the reference's status and merge rules (tests/e2e/ref_jobs.py) read the job folder: the
#     done shards with their fences count as done, and its merge gives the same bytes.
# Then the same job under mpirun -np 4 on 4 fake hosts, each host with its own caching mount.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
[ -c /dev/fuse ] || fail "/dev/fuse is missing: the caching file system needs FUSE"
/usr/bin/python3 -c 'import fusepy' 2>/dev/null || fail "python3-fusepy is missing (scripts/install-deps.sh installs it)"
command -v fusermount >/dev/null || fail "fusermount is missing (package fuse)"
RUN=$SRC/tests/e2e/cachefs-run.sh
export CACHEFS_LOG=$T/cachefs.log

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"id": i, "text": "cached row %d " % i + "c" * (i % 23)}) + "\n")
PY
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
sleep 0.3
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 40 --process-cmd "$T/proc.sh {input} {output}")
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/plain"
run_expect 0 "$BIN" worker --job-dir "$T/plain"
run_expect 0 "$BIN" merge --job-dir "$T/plain" --output "$T/plain.jsonl"

# counts JOB: "attempts shards takeovers superseded done_records backups stale_attempts"
# (stale_attempts: the taken-over locks whose attempt got its folder; a worker killed between
# its lock's create and its attempt folder leaves a takeover without one)
counts() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
att = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json"))]
shards = len(json.load(open(os.path.join(job, "manifest.json")))["shards"])
takeovers = len(os.listdir(os.path.join(job, "state", "stale_locks")))
tokens = {a.get("token") for a in att}
stale_dir = os.path.join(job, "state", "stale_locks")
stale_attempts = sum(json.load(open(os.path.join(stale_dir, n))).get("token") in tokens for n in os.listdir(stale_dir))
records = [n for n in os.listdir(os.path.join(job, "state", "done")) if not n.startswith(".")]
print(len(att), shards, takeovers, sum(a.get("status") == "superseded" for a in att),
      len(records), sum(bool(a.get("backup")) for a in att), stale_attempts)
PY
}
one_accepted() { exactly_once "$1" --fence || fail "accepted results of $1 are not one per shard"; }
ref_reads() {
  local job=$1 out=$2
  python3 "$SRC/tests/e2e/ref_jobs.py" status "$job" >"$T/ref-status.json" ||
    { cat "$T/ref-status.json"; fail "the reference's status does not call $job complete"; }
  python3 "$SRC/tests/e2e/ref_jobs.py" merge "$job" "$out" || fail "the reference's merge refuses $job"
}

# ==== 4 workers, each through its own caching mount; one SIGKILLed mid-run.
for secs in 3 30; do
  B=$T/back$secs M=$T/mnt$secs
  mkdir -p "$B" "$M"
  run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$B/job" --lease-secs 4 --heartbeat-secs 1
  pids=()
  for w in 1 2 3 4; do
    "$RUN" "$B" "$M" "$secs" "$T/w$w.pid" "$BIN" worker --job-dir "$M/job" --poll-interval-secs 1 \
      >"$T/w$secs.$w.out" 2>"$T/w$secs.$w.err" &
    pids+=($!)
  done
  for w in 1 2 3 4; do wait_for 20 test -s "$T/w$w.pid"; done
  # Kill worker 2 while it holds a shard (it has claimed at least one by then).
  wait_for 20 grep -q '^Claimed' "$T/w$secs.2.out"
  sleep 0.5
  kill -KILL "$(cat "$T/w2.pid")"
  rcs=()
  for p in "${pids[@]}"; do rc=0; wait "$p" || rc=$?; rcs+=("$rc"); done
  [ "${rcs[0]}" = 0 ] && [ "${rcs[2]}" = 0 ] && [ "${rcs[3]}" = 0 ] ||
    { tail -5 "$T"/w$secs.*.err; fail "cache ${secs}s: surviving workers exited ${rcs[*]}"; }
  [ "${rcs[1]}" = 137 ] || fail "cache ${secs}s: the killed worker exited ${rcs[1]}, expected 137"
  # A worker SIGKILLed between its done record's link and its lock's fence leaves a running lock
  # (and an attempt.json saying running) beside the shard's done record; the survivors count the
  # record and end. The next worker settles it, as the crash matrix's rerun does (done-before-fence).
  if [ -n "$(running_locks "$B/job")" ]; then
    echo "cache ${secs}s: the kill left $(running_locks "$B/job" | tr '\n' ' ')beside a done record; one more worker settles it"
    run_expect 0 "$BIN" worker --job-dir "$B/job" --no-backup
    [ -z "$(running_locks "$B/job")" ] || fail "cache ${secs}s: a running lock is left after the settling worker"
  fi
  read -r attempts shards takeovers superseded done backups stale_attempts <<<"$(counts "$B/job")"
  echo "cache ${secs}s, 4 workers, one SIGKILLed: attempts=$attempts shards=$shards takeovers=$takeovers (with an attempt folder: $stale_attempts) backups=$backups superseded=$superseded done=$done"
  [ "$done" = 40 ] || fail "cache ${secs}s: $done done records for 40 shards"
  # A worker killed between a record's temporary and its unlink leaves the temporary in
  # state/done; the takeover of its lease removes it (before any merge, which sweeps too).
  debris=$(find "$B/job/state/done" "$B/job/state/failed" -name '.*.tmp' | head -3)
  [ -z "$debris" ] || fail "cache ${secs}s: record temporaries left after the takeover: $debris"
  [ "$superseded" = 0 ] || fail "cache ${secs}s: $superseded superseded attempts (a shard ran twice)"
  # The killed worker's shard is run again once: by the takeover after its lease, or by a
  # backup when the others went idle first (the takeover then waits for the backup and only
  # fences its record). Never both: that would be a shard run twice.
  [ $((takeovers + backups)) -le 1 ] || fail "cache ${secs}s: $takeovers takeover(s) and $backups backup(s) for one killed worker"
  [ "$attempts" = $((shards + stale_attempts + backups)) ] || fail "cache ${secs}s: $attempts attempts for $shards shards, $takeovers takeover(s) ($stale_attempts with an attempt folder) and $backups backup(s)"
  one_accepted "$B/job"
  run_expect 0 "$BIN" merge --job-dir "$B/job" --output "$T/cached$secs.jsonl"
  cmp "$T/plain.jsonl" "$T/cached$secs.jsonl" || fail "cache ${secs}s: output differs from a plain run"
  ref_reads "$B/job" "$T/ref$secs.jsonl"
  cmp "$T/plain.jsonl" "$T/ref$secs.jsonl" || fail "cache ${secs}s: the reference's merge gives other bytes"
  pass "cache ${secs}s: $attempts attempts for $shards shards ($takeovers takeover, $backups backup after the kill), none superseded, exactly once, output identical, the reference reads the folder"
done

# ==== mpirun -np 4 on 4 fake hosts, each host with its own caching mount (3 s).
fakehosts_check
fakehosts_setup 4
B=$T/backmpi M=$T/mntmpi
mkdir -p "$B" "$M"
export FAKEHOSTS_CACHEFS="$B $M 3"
# Without this mpirun starts orted with --daemonize, which would leave the host's mount behind.
export OMPI_MCA_orte_leave_session_attached=1
ranks_reset
run_expect 0 $MPIRUN $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$M/job"
unset FAKEHOSTS_CACHEFS OMPI_MCA_orte_leave_session_attached
expect_out "PASS: 40 shards were completed by 4 node(s); merged 400 rows"
ranks_expect 4 0
read -r attempts shards takeovers superseded done backups stale_attempts <<<"$(counts "$B/job")"
echo "mpirun, 4 fake hosts with caching mounts: attempts=$attempts shards=$shards superseded=$superseded"
[ "$attempts" = 40 ] && [ "$superseded" = 0 ] || fail "mpirun: $attempts attempts ($superseded superseded) for 40 shards"
one_accepted "$B/job"
cmp "$T/plain.jsonl" "$B/job/merged.jsonl" || fail "mpirun: output differs from a plain run"
ref_reads "$B/job" "$T/refmpi.jsonl"
pass "mpirun -np 4, 4 fake hosts, each through its own caching mount: 40 attempts for 40 shards, output identical"
