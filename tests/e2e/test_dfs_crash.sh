#!/bin/bash
# The crash points that involve another host, on a real distributed file system: a GlusterFS
# volume (tests/e2e/gluster.sh) with the 600 s client caches (md-cache and nl-cache), two fake
# hosts, each its own client of the volume and its own host name (a UTS namespace, so that the
# survivor cannot judge the dead worker's process and temporaries as its own).
#
# For each crash point below, a fresh job of 3 shards in a folder of its own (the jobs share the
# volume and run side by side): node1's worker dies at the point (test builds:
# ESHARD_TEST_CRASH_AT, _exit(99)) on its first shard; then node2's worker, started while node1
# still holds that shard, finishes the job: it takes that shard over once the lease has run out
# (heartbeat 1 s, lease 4 s; no backups, so that the shard is taken over, not raced), or fences
# it when node1's record is there. Then, for each job:
#   - node1's worker exited 99 at its point, node2's exited 0, each within a bound;
#   - exactly once: one done record per shard, whose token is the one attempt that says done,
#     and the shard's lock is its done fence;
#   - the merged output is byte-identical to a run on local disk;
#   - no failed record, no backup, no superseded attempt (no point explains one: node1 dies
#     before its publish or after it, it never publishes late), no processor left running;
#   - what node2 did is what the point leaves it to do (below), read on the brick;
#   - no debris: the temporary of node1's done record (publish-after-temp: never linked;
#     publish-after-link: a second name of the record) is gone once node2 has ended (README,
#     "Failure handling"; test_crash_matrix checks the same on one host), and no temporary is
#     left in the jobs once they are merged.
#
# The points chosen are those after which another worker must clean up or take over what the
# dead one left: it holds a running lock from the claim to the fence. The others are not about
# another host: prepare-*, merge-*, run-before-finalize and dlc-* run on one host or in one
# MPI job (test_crash_matrix covers them); failed-*, release-* and retry-* need a failing shard,
# whose failed record this test excludes. The points and what node2 finds:
#   - a running lock and no record (takeover: node1's lock moved to state/stale_locks, its
#     attempt, if it has one, marked stale, node2 runs the shard again):
#       claim-after-lock (the lock, no attempt folder), claim-after-attempt-json,
#       worker-child-running, heartbeat-mid-rewrite (a lease refresh cut between the write of
#       the lock and its truncation), materialize-after-rename (the result is in the attempt
#       folder), done-before-link, publish-after-temp (the done record's temporary, unlinked);
#   - a running lock and node1's done record (node2, waiting for the last shard, writes the
#     fence as soon as it sees the record; the attempt that published says done, with
#     recovered_at when it had not said so yet; nothing runs again):
#       publish-after-link, done-before-attempt (recovered), done-before-fence;
#   - the fence (nothing to do: node2 must see a finished shard through its cache):
#       done-after-fence.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
need_test_hooks
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
TAKEN="claim-after-lock claim-after-attempt-json worker-child-running heartbeat-mid-rewrite"
TAKEN+=" materialize-after-rename done-before-link publish-after-temp"
FENCED="publish-after-link done-before-attempt done-before-fence"
FINISHED="done-after-fence"
POINTS="$TAKEN $FENCED $FINISHED"
# A point renamed in the sources would never fire: each must be there (node1's exit 99 checks
# that it fired).
for p in $POINTS; do
  grep -qF "\"$p\"" "$SRC"/src/*.c || fail "crash point $p is not in the sources"
done
gluster_setup

dfs_input 60
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 3)
dfs_plain_run "$T/plain.jsonl"
# The processor takes 2 s on node1 (two lease refreshes before its crash), 0.3 s elsewhere (so
# node2 is done with its own shards and waits for node1's well before the lease runs out: it
# fences a published record as soon as it sees it, without a takeover); it registers its pid on
# local disk while it runs, so that none can outlive the test unnoticed.
mkdir -p "$T/procs"
cat >"$T/cproc.sh" <<EOF
#!/bin/sh
echo \$\$ >"$T/procs/\$\$"
trap 'rm -f "$T/procs/\$\$"' EXIT
if [ "\$(hostname)" = node1 ]; then sleep 2; else sleep 0.3; fi
cp "\$1" "\$2"
EOF
chmod +x "$T/cproc.sh"

# each CMD...: a script that runs CMD for every point at once (the word POINT in CMD replaced
# by the point), each with its output in $T/<host>-<point>.{out,err,rc}; it ends when they have.
each() {
  local f=$T/each.$RANDOM
  {
    echo '#!/bin/bash'
    echo "for p in $POINTS; do"
    printf '  ( %s >"%s/$(hostname)-$p.out" 2>"%s/$(hostname)-$p.err"; echo $? >"%s/$(hostname)-$p.rc" ) &\n' \
      "${*//POINT/\$p}" "$T" "$T" "$T"
    echo 'done'
    echo 'wait'
  } >"$f"
  chmod +x "$f"
  echo "$f"
}
run_expect 0 gluster_on_host prep "$(each "$BIN" prepare "${COMMON[@]}" --job-dir "$T/mnt/POINT" \
  --process-cmd "'$T/cproc.sh {input} {output}'" --heartbeat-secs 1 --lease-secs 4)"
for p in $POINTS; do
  [ "$(cat "$T/prep-$p.rc")" = 0 ] || { cat "$T/prep-$p.err"; fail "$p: prepare exited $(cat "$T/prep-$p.rc")"; }
done

# node1: one worker per job, each dying at its job's point.
gluster_on_host node1 "$(each env ESHARD_TEST_CRASH_AT=POINT "$BIN" worker --job-dir "$T/mnt/POINT" \
  --poll-interval-secs 1 --progress-secs 0)" &
N1=$!
# node1 holds a shard of every job (a running lock of its own, read on the brick), or its
# worker has ended already (claim-after-lock dies right after the lock).
node1_holds() {
  python3 - "$GLUSTER_BRICK" "$T" $POINTS <<'PY'
import glob, json, os, sys
brick, t = sys.argv[1], sys.argv[2]
for p in sys.argv[3:]:
    if os.path.exists(os.path.join(t, "node1-%s.rc" % p)):
        continue
    held = False
    for f in glob.glob(os.path.join(brick, p, "state", "locks", "*.lock")):
        try:
            l = json.load(open(f))
        except Exception:
            continue
        held = held or (l.get("hostname") == "node1" and l.get("status", "running") == "running")
    if not held:
        sys.exit(1)
PY
}
wait_for 60 node1_holds
# node2: one worker per job, on its own client, while node1's shards are still held.
gluster_on_host node2 "$(each "$BIN" worker --job-dir "$T/mnt/POINT" --poll-interval-secs 1 --no-backup \
  --progress-secs 0)" &
N2=$!
wait_bounded 60 "$N1"
wait "$N1" || fail "node1's client ended with an error"
wait_bounded 120 "$N2"
wait "$N2" || fail "node2's client ended with an error"
for p in $POINTS; do
  rc=$(cat "$T/node1-$p.rc")
  [ "$rc" = 99 ] && grep -qF "eshard test crash point '$p' reached" "$T/node1-$p.err" ||
    { cat "$T/node1-$p.err"; fail "$p: node1's worker exited $rc, not at its crash point (99)"; }
  rc=$(cat "$T/node2-$p.rc")
  [ "$rc" = 0 ] || { cat "$T/node2-$p.err"; fail "$p: node2's worker exited $rc, expected 0"; }
done
pass "node1's worker died at each of the $(echo $POINTS | wc -w) points, node2's finished each job"
# The records' temporaries node1 left (publish-after-temp, publish-after-link), checked below.
record_temps() { find "$GLUSTER_BRICK"/*/state/done "$GLUSTER_BRICK"/*/state/failed -name '.*.tmp' 2>/dev/null; }
record_temps >"$T/temps-after-takeover"

# The merges, on a third client.
run_expect 0 gluster_on_host check "$(each "$BIN" merge --job-dir "$T/mnt/POINT" --output "$T/out-POINT.jsonl")"
# node1's attempt: "status recovered" ("-" when it has none), read on the brick.
node1_attempt() {
  python3 - "$GLUSTER_BRICK/$1" <<'PY'
import glob, json, os, sys
for p in glob.glob(os.path.join(sys.argv[1], "attempts", "*", "*", "attempt.json")):
    a = json.load(open(p))
    if a.get("hostname") == "node1":
        print(a.get("status"), "recovered" if a.get("recovered_at") else "-")
        break
else:
    print("- -")
PY
}
for p in $POINTS; do
  job=$GLUSTER_BRICK/$p
  rc=$(cat "$T/check-$p.rc")
  [ "$rc" = 0 ] || { cat "$T/check-$p.err"; fail "$p: the merge exited $rc"; }
  exactly_once "$job" --fence || { tail -5 "$T/node1-$p.err" "$T/node2-$p.err"; fail "$p: the accepted results are not one per shard"; }
  cmp "$T/plain.jsonl" "$T/out-$p.jsonl" || fail "$p: the merged output differs from a run on local disk"
  read -r attempts shards takeovers superseded done backups failed <<<"$(dfs_counts "$job")"
  read -r n1status n1rec <<<"$(node1_attempt "$p")"
  echo "$p: attempts=$attempts takeovers=$takeovers superseded=$superseded done=$done failed=$failed backups=$backups node1=$n1status/$n1rec"
  [ "$done" = 3 ] && [ "$failed" = 0 ] || fail "$p: $done done and $failed failed records for 3 shards"
  [ "$superseded" = 0 ] && [ "$backups" = 0 ] || fail "$p: $superseded superseded attempts, $backups backups"
  case " $TAKEN " in
    *" $p "*)
      [ "$takeovers" = 1 ] || fail "$p: $takeovers takeovers of node1's shard, expected 1"
      if [ "$p" = claim-after-lock ]; then
        [ "$attempts" = 3 ] && [ "$n1status" = - ] || fail "$p: node1 has an attempt ($n1status), or $attempts attempts"
      else
        [ "$attempts" = 4 ] && [ "$n1status" = stale ] || fail "$p: node1's attempt is $n1status, $attempts attempts (expected stale, 4)"
      fi
      ;;
    *)
      [ "$takeovers" = 0 ] && [ "$attempts" = 3 ] || fail "$p: $takeovers takeovers, $attempts attempts: node1's published shard ran again"
      [ "$n1status" = done ] || fail "$p: node1's attempt is $n1status, expected done"
      case $p in
        publish-after-link | done-before-attempt) want=recovered ;;
        *) want=- ;;
      esac
      [ "$n1rec" = "$want" ] || fail "$p: node1's attempt recovered: $n1rec, expected $want"
      ;;
  esac
done
for f in $(ls "$T/procs"); do
  ! grep -qF "$T/cproc.sh" "/proc/$f/cmdline" 2>/dev/null || fail "processor $f still runs after the jobs"
done
pass "on GlusterFS with 600 s client caches, at every point: exactly once, output identical, no failure, none superseded"

# No debris: the temporary of the dead holder's record goes when its shard is taken over or
# fenced by another worker (README, "Failure handling"), as on one host (test_crash_matrix), and
# none is left in the job folders once they are merged (a merge keeps another host's).
[ ! -s "$T/temps-after-takeover" ] ||
  fail "record temporaries left after node2 took over or fenced node1's shard: $(cat "$T/temps-after-takeover")"
debris=$(find "$GLUSTER_BRICK"/*/ -name '.*.tmp' | head -5)
[ -z "$debris" ] || fail "temporaries left in the merged jobs: $debris"
pass "no record temporary left by node1 after the takeovers, no temporary left after the merges"
