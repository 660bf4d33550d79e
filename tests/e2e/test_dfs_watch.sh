#!/bin/bash
# A kept view that stops listing unchanged folders still sees another client's records (issue
# 29): on a GlusterFS volume (tests/e2e/gluster.sh, 600 s client caches), one client prepares
# a job of 6 shards, finishes 4 of them (tests/bench/finish_job.py: record, fence, attempt
# folder, result) and follows it with `status --watch --interval 1` (the kept view of rank 0's
# progress line: the client that made the job's folders, as rank 0's is). After 8 s of refreshes
# the view has confirmed its folders' stamps and lists none of them (docs/design.md,
# "Observability"); then a second client finishes the last 2 shards. The view must list again
# (the folders' times changed, which the server tells the first client's cache) and end the
# watch with the job complete within 10 s, its last snapshot 6 of 6 done. The view runs under
# strace: in the last 4 s before the change it listed none of state/done, state/failed,
# state/locks and attempts/ (a stamp that never held on GlusterFS would list them every second
# and pass the rest of this test), and it listed state/done after the change.
#
# With ESHARD_DFS_WATCH_EVENTS=1 (tests/e2e/test_dfs_watch_events.sh) both clients write the
# shards' events as workers do (finish_job.py --events), and the second client first finishes
# one shard only: the view must show it (5 of 6) from its events alone, listing none of the
# four folders in the 3 s after (a changed folder whose changes new events name waits for its
# listing: docs/design.md); then the last shard, and the watch ends as above (it lists once
# more before it ends on a job that looks complete).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gluster.sh"
gluster_setup

command -v strace >/dev/null || fail "strace is missing (scripts/install-deps.sh installs it)"
dfs_input 12
job=$T/mnt/job
events=
[ "${ESHARD_DFS_WATCH_EVENTS:-0}" = 1 ] && events=--events
cat >"$T/first.sh" <<'EOF'
#!/bin/bash
set -e
bin=$1 T=$2 src=$3 job=$4 events=$5
"$bin" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 6 \
  --process-cmd 'cp {input} {output}' --job-dir "$job" >"$T/prep.out" 2>&1
python3 "$src/tests/bench/finish_job.py" "$job" --results --limit 4 $events
# LeakSanitizer cannot run under ptrace: a sanitizer build's leak check is off for this process.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec strace -f -ttt -y -o "$T/st.txt" -e trace=getdents64 "$bin" status --job-dir "$job" --watch --interval 1 \
  >"$T/watch.out" 2>&1
EOF
gluster_run first bash "$T/first.sh" "$BIN" "$T" "$SRC" "$job" "$events" &
first=$!
shown() { grep -q "^Progress: $1/6 shards done" "$T/watch.out" 2>/dev/null; }
wait_for 120 shown 4
sleep 4
q0=${EPOCHREALTIME/,/.}
sleep 4
q1=${EPOCHREALTIME/,/.}
kill -0 "$first" 2>/dev/null || { cat "$T/watch.out" "$T/prep.out"; fail "status --watch ended before the job was complete"; }
shown 6 && fail "the view shows 6 done before the last 2 shards were finished"
pass "the view shows 4 of 6 done after 8 s of refreshes"

if [ -n "$events" ]; then
  gluster_run second python3 "$SRC/tests/bench/finish_job.py" "$job" --results --limit 1 $events ||
    fail "the second client could not finish shard 5"
  wait_for 5 shown 5
  sleep 3
  q2=${EPOCHREALTIME/,/.}
  kill -0 "$first" 2>/dev/null || fail "status --watch ended with a shard left"
fi
gluster_run second python3 "$SRC/tests/bench/finish_job.py" "$job" --results $events ||
  fail "the second client could not finish the last shards"
t0=$EPOCHREALTIME
ended() { ! kill -0 "$first" 2>/dev/null; }
wait_for 10 ended
secs=$(awk -v a="${t0/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }')
rc=0
wait "$first" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/watch.out"; fail "status --watch exited $rc, not 0 (the job complete)"; }
last=$(grep '^Progress:' "$T/watch.out" | tail -1)
case $last in
  "Progress: 6/6 shards done"*) pass "the view saw the other client's 2 records and ended the watch after $secs s: $last" ;;
  *) fail "the last snapshot is not 6 of 6 done: $last" ;;
esac
# strace's lines: "PID EPOCH getdents64(FD</path>, ...": the listings of the four folders.
listed() {
  awk -v a="$1" -v b="$2" '$2 >= a && $2 < b && /getdents64\([0-9]+<[^>]*\/job\/(state\/done|state\/failed|state\/locks|attempts)>/' "$T/st.txt" | wc -l
}
quiet=$(listed "$q0" "$q1")
after=$(listed "$q1" 9999999999)
[ "$quiet" = 0 ] || fail "the view listed its unchanged folders $quiet time(s) in the 4 s before the change"
if [ -n "$events" ]; then
  named=$(listed "$q1" "$q2")
  [ "$named" = 0 ] || fail "the view listed the four folders $named time(s) after a change the events named"
  [ "$after" -gt 0 ] || fail "the view did not list a folder before it ended the watch"
  pass "no listing of the four folders in the 4 quiet s, nor for the shard its events named; $after getdents64 at the end"
else
  [ "$after" -gt 0 ] || fail "the view did not list a folder after the change"
  pass "no listing of the four folders in the 4 quiet s, $after getdents64 on them after the change"
fi
