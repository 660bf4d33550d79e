#!/bin/bash
# run -np 4 on 4 fake hosts whose job folder is a real distributed file system: a GlusterFS
# volume (tests/e2e/gluster.sh), one client per host in its own mount namespace, with the
# metadata caches of production clients (md-cache and the negative-lookup cache, 600 s):
#   - the job PASSes, every rank exits 0, mpirun ends within its bound;
#   - one attempt per shard (and one per backup, should a loaded machine make a shard overdue),
#     none superseded but by a backup (the terminal fences hold on a real client cache);
#   - exactly one done record per shard, whose token is the one attempt that says done;
#   - the merged output is byte-identical to a run on local disk.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
. "$(dirname "$0")/gluster.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
fakehosts_check
fakehosts_setup 4
gluster_setup

dfs_input 400
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 40)
dfs_plain_run "$T/plain.jsonl"

export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS
# Without this mpirun starts orted with --daemonize, which would leave the host's mount behind.
export OMPI_MCA_orte_leave_session_attached=1
ranks_reset
s=$(date +%s)
run_expect 0 timeout 180 $MPIRUN $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --process-cmd "$T/proc.sh 0.3 {input} {output}" --job-dir "$T/mnt/job" --poll-interval-secs 1
unset FAKEHOSTS_GLUSTER OMPI_MCA_orte_leave_session_attached
expect_out "PASS: 40 shards were completed by 4 node(s); merged 400 rows"
ranks_expect 4 0
job=$GLUSTER_BRICK/job
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
echo "gluster, 4 fake hosts, caches 600 s: $(($(date +%s) - s)) s, attempts=$attempts shards=$shards superseded=$superseded takeovers=$takeovers backups=$backups failed=$failed"
# A shard the loaded machine made overdue may get a backup, whose win supersedes its primary;
# any other superseded attempt ran a finished shard.
[ "$attempts" = $((40 + backups)) ] || fail "$attempts attempts ($backups backups) for 40 shards"
dfs_superseded_ok "$job" || fail "an attempt was superseded by something else than a backup"
[ "$done" = 40 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 40 shards"
exactly_once "$job" --fence || fail "the accepted results are not one per shard"
cmp "$T/plain.jsonl" "$job/merged.jsonl" || fail "the merged output differs from a run on local disk"
pass "run -np 4 on 4 GlusterFS clients with 600 s caches: 40 attempts for 40 shards, none superseded, exactly once, output identical"
