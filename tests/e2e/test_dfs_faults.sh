#!/bin/bash
# Backups, preemption and a chaos round of `run -np 4` on 4 fake hosts whose job folder is a
# GlusterFS volume (tests/e2e/gluster.sh), one client per host, with the 600 s client caches
# (md-cache and nl-cache): what test_backup, test_preempt and test_chaos try on local disk,
# on a real client cache. Every job ends exactly once (one done record per shard, whose token
# is the one attempt that says done; its lock is the done fence), byte-identical to a run on
# local disk, every mpirun within its bound, and the only superseded attempts are primaries
# that lost to a backup (a slow machine can make any shard overdue):
#   1. backups: node2's processor is 20x slower; an idle rank backs its shard up, the backup
#      wins, node2's primary ends superseded: the only superseded attempts are primaries that
#      lost to a backup; nothing counts toward the retry limit;
#   2. preemption: every rank gets SIGTERM (as from scancel) while it runs a shard: each
#      attempt cut off ends preempted (none failed or stale), the ranks exit 143,
#      no running lock is left; the same command again completes the job;
#   3. chaos: a rank is SIGKILLed and a fifth of the attempts fail in the first round; the same
#      command with --retry-failed again until it passes (at most 4 rounds).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
. "$(dirname "$0")/gluster.sh"
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
fakehosts_check
fakehosts_setup 4
gluster_setup

dfs_input 320
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 16)
dfs_plain_run "$T/plain.jsonl"
# The processor: how it behaves is $T/mode (local disk, read at its start); it registers its pid
# in $T/procs while it runs.
mkdir -p "$T/procs"
cat >"$T/fproc.sh" <<EOF
#!/bin/sh
echo \$\$ >"$T/procs/\$\$"
trap 'rm -f "$T/procs/\$\$"' EXIT
case \$(cat "$T/mode") in
  slow-node2) if [ "\$(hostname)" = node2 ]; then sleep 8; else sleep 0.4; fi ;;
  # chaos: a fifth of the first round's attempts fail (a hash of the shard and the attempt).
  chaos) h=\$(printf '%s' "\$3.\$(basename "\$4")" | cksum | cut -d' ' -f1)
         if [ \$((h % 5)) = 0 ] && [ "\$(cat "$T/round")" = 1 ]; then exit 3; fi
         sleep 0.5 ;;
  *) sleep 1 ;;
esac
cp "\$1" "\$2"
EOF
chmod +x "$T/fproc.sh"
export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS
export OMPI_MCA_orte_leave_session_attached=1
# fake_run JOB OPTIONS...: run on the 4 hosts, the job folder through each host's client.
# shellcheck disable=SC2086
fake_run() {
  local job=$1
  shift
  timeout 120 $MPIRUN $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
    --process-cmd "$T/fproc.sh {input} {output} {shard_id} {attempt_dir}" --job-dir "$T/mnt/$job" \
    --poll-interval-secs 1 "$@"
}
# at_least N CMD...: CMD prints a number >= N (for wait_for, which runs it again each time).
at_least() { local n=$1; shift; [ "$("$@")" -ge "$n" ]; }
done_records() { find "$GLUSTER_BRICK/$1/state/done" -name '*.json' ! -name '.*' 2>/dev/null | wc -l; }
children() { ls "$T/procs" | wc -l; }
# statuses JOB: "shard host status primary|backup" per attempt (read on the brick).
statuses() {
  python3 - "$GLUSTER_BRICK/$1" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json"))):
    a = json.load(open(p))
    print(a["shard_id"], a["hostname"], a["status"], "backup" if a.get("backup") else "primary")
PY
}
# finished JOB: exactly once, the fences, identical output, nothing running.
finished() {
  local name=$1 job=$GLUSTER_BRICK/$1
  shift
  exactly_once "$job" --fence "$@" || fail "$name: the accepted results are not one per shard"
  [ -z "$(running_locks "$job")" ] || fail "$name: running locks left: $(running_locks "$job")"
  cmp "$T/plain.jsonl" "$job/merged.jsonl" || fail "$name: the merged output differs from a run on local disk"
  for f in $(ls "$T/procs"); do
    ! grep -qF "$T/fproc.sh" "/proc/$f/cmdline" 2>/dev/null || fail "$name: processor $f still runs after the job"
  done
}

# ---- 1. backups
echo slow-node2 >"$T/mode"
ranks_reset
run_expect 0 fake_run backup
expect_out "PASS: 16 shards were completed by"
ranks_expect 4 0
statuses backup >"$T/att"
grep -q ' node2 superseded primary$' "$T/att" || { cat "$T/att"; fail "backup: node2's primary was not superseded"; }
dfs_superseded_ok "$GLUSTER_BRICK/backup" || fail "backup: an attempt was superseded by something else than a backup"
finished backup --uncounted
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$GLUSTER_BRICK/backup")"
echo "backups: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded"
[ "$takeovers" = 0 ] || fail "backup: $takeovers takeovers"
pass "backups on GlusterFS: node2's primary superseded by the backup that won, no other, exactly once, output identical"

# ---- 2. preemption: SIGTERM to every rank while each runs a shard
echo steady >"$T/mode"
ranks_reset
fake_run preempt >"$T/out" 2>"$T/err" &
M=$!
ranks_wait_pids 4 60
wait_for 60 at_least 4 done_records preempt
wait_for 30 at_least 4 children
# shellcheck disable=SC2046
kill -TERM $(cat "$T"/ranks/pid.*)
rc=0
wait_bounded 60 "$M"
wait "$M" || rc=$?
[ "$rc" != 0 ] || { cat "$T/out"; fail "preempt: mpirun exited 0 after a SIGTERM"; }
# mpirun ends the ranks still stopping once one exits 143 (their wrappers may not record it).
for f in "$T"/ranks/rc.*; do
  [ "$(cat "$f")" = 143 ] || fail "preempt: rank ${f##*.} exited $(cat "$f"), expected 143"
done
statuses preempt >"$T/att"
grep -q ' preempted primary$' "$T/att" || { cat "$T/att" "$T/err"; fail "preempt: no attempt was preempted"; }
! grep -qE ' (failed|stale|running) ' "$T/att" || { cat "$T/att"; fail "preempt: an attempt did not end preempted or done"; }
dfs_superseded_ok "$GLUSTER_BRICK/preempt" || fail "preempt: an attempt was superseded by something else than a backup"
[ -z "$(running_locks "$GLUSTER_BRICK/preempt")" ] || fail "preempt: running locks left: $(running_locks "$GLUSTER_BRICK/preempt")"
npre=$(grep -c ' preempted ' "$T/att")
ranks_reset
run_expect 0 fake_run preempt
expect_out "PASS: 16 shards were completed by"
statuses preempt >"$T/att"
! grep -qE ' (failed|stale) ' "$T/att" || { cat "$T/att"; fail "preempt: the rerun has failed or stale attempts"; }
dfs_superseded_ok "$GLUSTER_BRICK/preempt" || fail "preempt: an attempt of the rerun was superseded by something else than a backup"
finished preempt --uncounted
pass "preemption on GlusterFS: $npre attempts preempted, none failed or stale; the rerun completes, exactly once"

# ---- 3. chaos: rank 2 SIGKILLed 2 s into the first round, a fifth of its attempts failing
echo chaos >"$T/mode"
round=0 rc=1
while [ "$round" -lt 4 ] && [ "$rc" != 0 ]; do
  round=$((round + 1))
  echo "$round" >"$T/round"
  ranks_reset
  if [ "$round" = 1 ]; then
    (
      ranks_wait_pids 4 30
      sleep 2
      kill -KILL "$(cat "$T/ranks/pid.2")"
    ) &
    killer=$!
  fi
  rc=0
  fake_run chaos --lease-secs 4 --heartbeat-secs 1 --max-retries 3 --retry-failed >"$T/out" 2>"$T/err" || rc=$?
  [ "$round" != 1 ] || wait "$killer" || fail "chaos: the rank was not killed"
  [ "$rc" != 124 ] || { tail -20 "$T/err"; fail "chaos: round $round hung"; }
  echo "chaos round $round: exit $rc"
done
[ "$rc" = 0 ] || { tail -20 "$T/err"; fail "chaos: no PASS after $round rounds"; }
expect_out "PASS: 16 shards were completed by"
finished chaos
dfs_superseded_ok "$GLUSTER_BRICK/chaos" || fail "chaos: an attempt was superseded by something else than a backup"
read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$GLUSTER_BRICK/chaos")"
echo "chaos: rounds=$round attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded"
pass "chaos on GlusterFS: PASS after $round rounds, exactly once, output identical"
