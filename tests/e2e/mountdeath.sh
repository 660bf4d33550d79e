# shellcheck shell=bash
# A host's mount of the job folder killed under `run -np 4` on 4 fake hosts, each with its own
# GlusterFS client (tests/e2e/gluster.sh): the setup and checks that test_dfs_run_mount_death.sh
# and test_dfs_run_mount_edges.sh share. Source it after lib.sh, ranks.sh, fakehosts.sh and
# gluster.sh, then call mountdeath_setup.
#
#   mountdeath_setup            the volume, 4 fake hosts, the input (24 shards) and its output on
#                               local disk ($T/plain.jsonl); HB=1, LEASE=5; $T/proc-log.sh logs
#                               each child (pid, host, input) to $T/procs.log and takes 30 s on
#                               the host named in $T/slow-host
#   start_run JOB [MPIRUN OPTION...] [-- RUN OPTION...]
#                               run -np 4 on the fake hosts in the background
#   rank_on HOST, child_of HOST, kill_under_shard HOST JOB, wait_line SECS TEXT, child_stopped,
#   passed_without_one, check_job JOB [TAKEOVERS]   see each below

mountdeath_setup() {
  ranks_setup
  unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
  fakehosts_check
  fakehosts_setup 4
  gluster_setup
  dfs_input 240
  # proc.sh, with each child's pid, host and input logged on local disk; on the host named in
  # $T/slow-host a shard takes 30 s, so that a child not stopped would outlive every check.
  cat >"$T/proc-log.sh" <<EOF2
#!/bin/sh
echo "\$\$ \$(hostname) \$2" >>$T/procs.log
secs=\$1
shift
[ "\$(hostname)" != "\$(cat $T/slow-host)" ] || secs=30
exec $T/proc.sh "\$secs" "\$@"
EOF2
  chmod +x "$T/proc-log.sh"
  : >"$T/slow-host"
  COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 24)
  dfs_plain_run "$T/plain.jsonl"
  HB=1 LEASE=5
  export FAKEHOSTS_GLUSTER=$GLUSTER_FAKEHOSTS
  # Without this mpirun starts orted with --daemonize, which would leave the host's mount behind.
  export OMPI_MCA_orte_leave_session_attached=1
}

# start_run JOB [MPIRUN OPTION...] [-- RUN OPTION...]: run -np 4 on the fake hosts in the
# background (stdout and stderr in $T/run.out and $T/run.err, the launcher's pid in RUN_PID;
# procs.log emptied).
start_run() {
  local job=$1 mpi=() opts=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do mpi+=("$1"); shift; done
  [ $# = 0 ] || { shift; opts=("$@"); }
  ranks_reset
  : >"$T/procs.log"
  # shellcheck disable=SC2086
  $MPIRUN $FAKEHOSTS_MPIRUN_ARGS ${mpi[@]+"${mpi[@]}"} -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
    --process-cmd "$T/proc-log.sh 2 {input} {output}" --job-dir "$T/mnt/$job" --heartbeat-secs $HB \
    --lease-secs $LEASE --poll-interval-secs 1 ${opts[@]+"${opts[@]}"} >"$T/run.out" 2>"$T/run.err" &
  RUN_PID=$!
  ranks_wait_pids 4 60
}
# passed_without_one: the run started by start_run ends (within 120 s) with every rank's exit 0
# and PASS, and rank 0 says that one rank could not reach the job folder and left the work.
passed_without_one() {
  local rc=0
  wait_bounded 120 "$RUN_PID"
  wait "$RUN_PID" || rc=$?
  [ "$rc" = 0 ] || { cat "$T/run.err"; fail "mpirun exited $rc, expected 0"; }
  ranks_expect 4 0
  grep -qF "PASS: 24 shards were completed by" "$T/run.out" || { cat "$T/run.out"; fail "no PASS"; }
  grep -qF "WARNING: 1 rank(s) could not reach the job folder and left the work" "$T/run.err" ||
    { cat "$T/run.err"; fail "rank 0 did not say that a rank left the work"; }
}

# rank_on HOST: the rank that runs on HOST.
rank_on() { grep -lx "$1" "$T"/ranks/host.* | sed 's/.*host\.//'; }
# child_of HOST: the pid of HOST's last child of $SHARD (procs.log), or nothing.
child_of() { awk -v h="$1" -v s="/$SHARD.jsonl" '$2 == h && index($3, s) { p = $1 } END { print p }' "$T/procs.log"; }
# kill_under_shard HOST JOB: once HOST's rank holds a shard whose child runs (for 30 s: HOST is
# made the slow host before the run), kill HOST's client; sets SHARD, RANK, CHILD and T0 (the kill's time).
kill_under_shard() {
  local pid
  wait_for 20 test -n "$(rank_on "$1")"
  RANK=$(rank_on "$1")
  pid=$(cat "$T/ranks/pid.$RANK")
  SHARD= CHILD=
  for _ in $(seq 1 600); do
    read -r SHARD _ <<<"$(dfs_held_by "$GLUSTER_BRICK/$2" "$pid" 20)"
    [ -z "$SHARD" ] || CHILD=$(child_of "$1")
    [ -z "$CHILD" ] || break
    sleep 0.1
  done
  [ -n "$CHILD" ] || { cat "$T/run.err"; fail "rank $RANK on $1 ran no shard within 60 s"; }
  kill -0 "$CHILD" || fail "the child $CHILD of $SHARD on $1 ended before the kill"
  T0=$(now)
  kill -KILL "$(gluster_client_pid "$1")"
}
# wait_line SECS TEXT: TEXT appears in the launcher's stderr within SECS of the kill; prints
# how long after the kill it was seen.
wait_line() {
  local end
  end=$(python3 -c "import sys; print(float(sys.argv[1]) + float(sys.argv[2]))" "$T0" "$1")
  until grep -qF -- "$2" "$T/run.err"; do
    python3 -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" "$(now)" "$end" ||
      { cat "$T/run.err" >&2; fail "not within $1 s of the kill: $2"; }
    sleep 0.05
  done
  python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) - float(sys.argv[2])))" "$(now)" "$T0"
}
# child_stopped: the child that ran $SHARD when the mount was killed no longer runs.
child_stopped() { wait_for 5 sh -c "! kill -0 $CHILD 2>/dev/null"; }
# check_job JOB [TAKEOVERS]: every shard done once, no failed attempt or record, the output of
# local disk, and at least TAKEOVERS (default 1) takeovers or backups of $SHARD.
check_job() {
  local job=$GLUSTER_BRICK/$1 least=${2:-1} attempts shards takeovers superseded done backups failed
  read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
  echo "$1: attempts=$attempts shards=$shards takeovers=$takeovers backups=$backups superseded=$superseded failed=$failed"
  [ "$done" = 24 ] && [ "$failed" = 0 ] || fail "$done done and $failed failed records for 24 shards"
  [ $((takeovers + backups)) -ge "$least" ] || fail "nobody took $SHARD over"
  exactly_once "$job" --fence --uncounted --stale-ok || fail "the accepted results are not one per shard, or an attempt failed"
  cmp "$T/plain.jsonl" "$job/merged.jsonl" || fail "the merged output differs from a run on local disk"
}

