#!/bin/bash
# The file server restarts in the middle of a job: run -np 4 on 4 fake hosts on a GlusterFS
# volume (tests/e2e/gluster.sh); once some shards are done the brick process is SIGKILLed and
# the volume force-started from a second later until a new brick runs (the clients reconnect
# within about 3 s more):
#   - the workers ride through the outage (ENOTCONN on their lease refreshes, claims and
#     children's files): the job PASSes, every rank exits 0, mpirun ends within its bound;
#   - no shard is charged a failure (an attempt cut off by the outage ends preempted);
#   - exactly one done record per shard, output identical to a run on local disk.
# The volume keeps GlusterFS's short default caches: with the 600 s md-cache a restarted brick
# has forgotten which clients to tell about changes, and a client then keeps a lock file that
# another client replaced as a stale handle (flock fails ESTALE) for up to those 600 s; the
# workers end with that error after the outage budget instead of riding through (README).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
. "$(dirname "$0")/gluster.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
fakehosts_check
fakehosts_setup 4
gluster_setup --short-caches

dfs_input 400
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 40)
dfs_plain_run "$T/plain.jsonl"
job=$GLUSTER_BRICK/job
done_records() { find "$job/state/done" -name '*.json' ! -name '.*' 2>/dev/null | wc -l; }

# The fault, in the background: 8 shards done, then the brick dies and comes back.
(
  for _ in $(seq 1 600); do [ "$(done_records)" -ge 8 ] && break; sleep 0.1; done
  brick=$(gluster_brick_pid)
  [ -n "$brick" ] || { echo "no brick pid" >"$T/fault"; exit 1; }
  kill -KILL "$brick"
  t0=$(date +%s.%N)
  sleep 1
  gluster_restart_brick "$brick"
  echo "brick $brick killed at $(done_records) done records, started again after $(python3 -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0") s" >"$T/fault"
) &
fault=$!

export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS
export OMPI_MCA_orte_leave_session_attached=1
ranks_reset
rc=0
timeout 240 $MPIRUN $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --process-cmd "$T/proc.sh 0.5 {input} {output}" --job-dir "$T/mnt/job" --poll-interval-secs 1 \
  --heartbeat-secs 1 --lease-secs 20 >"$T/out" 2>"$T/err" || rc=$?
unset FAKEHOSTS_GLUSTER OMPI_MCA_orte_leave_session_attached
wait "$fault" || fail "the fault did not happen: $(cat "$T/fault" 2>/dev/null)"
cat "$T/fault"
[ "$rc" = 0 ] || { grep -E 'ERROR|answers again' "$T/err" | head -20; fail "the job exited $rc, expected 0"; }
expect_out "PASS: 40 shards were completed by"
ranks_expect 4 0
ridden=$(cat "$T/out" "$T/err" | grep -c 'answers again after' || true)
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
echo "server restart: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed outages ridden through=$ridden"
[ "$done" = 40 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 40 shards"
python3 - "$job" <<'PY' || fail "an attempt was charged a failure for the outage"
import glob, json, os, sys
bad = [p for p in glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json"))
       if json.load(open(p)).get("status") == "failed"]
sys.exit(1 if bad else 0)
PY
exactly_once "$job" --fence || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$job/merged.jsonl" || fail "the merged output differs from a run on local disk"
pass "server restart mid-job: PASS, no failed attempt, $ridden outage(s) ridden through, exactly once, output identical"
