#!/usr/bin/env bash
# Hostile job folders (issue 9, items 2 and 3): the job folder is a boundary and debris is cleaned.
# 1. A planted symbolic link (attempts/, attempts/<shard>/, state/done, state/locks, shards/) for
#    worker, merge, status, retry and verify: exit 2, one message naming the link, nothing
#    written into the folder it points at, and status never complete where merge refuses.
# 2. Done records merge refuses (pointing outside the job folder, not valid JSON): status and
#    merge agree and name the record.
# 3. prepare --job-dir <a regular file> says it is not a folder.
# 4. Debris: a SIGKILLed prepare's stage folder and a SIGKILLed merge's output temporary are
#    removed by the next successful prepare / merge (one line each); a live one is kept, and so
#    is a dead one made on another host (a fake host name in its own UTS namespace).
. "$(dirname "$0")/lib.sh"
need_test_hooks

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
S0=part-00000-of-00002

# prep JOB [CMD]: a 2-shard job at JOB processed by CMD (default cp).
CP='cp {input} {output}'
prep() {
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$1" \
    --num-shards 2 --process-cmd "${2:-$CP}"
}
# snapshot DIR: every entry below DIR with its type, size, mtime and content hash.
snapshot() {
  (cd "$1" && find . -printf '%p %y %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort)
}
# plant JOB REL: move JOB/REL (when it exists) to a folder outside the job and leave a
# symbolic link to it in its place; the outside folder's path is printed.
plant() {
  local job=$1 rel=$2 evil
  evil=$T/evil/$(basename "$job")-$(echo "$rel" | tr / _)
  mkdir -p "$evil"
  if [ -d "$job/$rel" ]; then cp -a "$job/$rel/." "$evil/"; rm -rf "${job:?}/$rel"; fi
  mkdir -p "$(dirname "$job/$rel")"
  ln -s "$evil" "$job/$rel"
  echo "$evil"
}

n=0
for rel in attempts "attempts/$S0" state/done state/locks shards; do
  for cmd in worker merge status retry verify; do
    tag=$(echo "$rel" | tr / _)-$cmd
    J=$T/jobs/$tag
    case $cmd in
      worker) prep "$J" ;;                      # nothing done yet: the worker has work to write
      retry) prep "$J" "false {input} {output}"                  # both shards fail: retry has work to move
             run_expect 2 "$BIN" worker --job-dir "$J" ;;
      *) prep "$J"; run_expect 0 "$BIN" worker --job-dir "$J" ;;   # complete: merge would succeed
    esac
    evil=$(plant "$J" "$rel")
    before=$(snapshot "$evil")
    out=$T/outs/$tag.jsonl; mkdir -p "$T/outs"
    case $cmd in
      worker) run_expect 2 "$BIN" worker --job-dir "$J" ;;
      merge) run_expect 2 "$BIN" merge --job-dir "$J" --output "$out" ;;
      status) run_expect 2 "$BIN" status --job-dir "$J" ;;
      retry) run_expect 2 "$BIN" retry --job-dir "$J" --all-failed ;;
      verify) run_expect 2 "$BIN" verify --job-dir "$J" --output "$out" ;;
    esac
    expect_err "$J/$rel"
    expect_err "symbolic link"
    [ "$(grep -c . "$T/err")" -le 2 ] || { cat "$T/err"; fail "$tag: more than a line or two on stderr"; }
    [ "$before" = "$(snapshot "$evil")" ] || fail "$tag: $cmd wrote into $evil through the link $J/$rel"
    [ ! -e "$out" ] || fail "$tag: $cmd wrote $out"
    # status and merge agree: neither calls this job complete.
    run_expect 2 "$BIN" status --job-dir "$J" --json
    if grep -q '"complete": true' "$T/out"; then fail "$tag: status --json says complete"; fi
    run_expect 2 "$BIN" merge --job-dir "$J" --output "$out"
    [ ! -e "$out" ] || fail "$tag: merge wrote $out"
    n=$((n + 1))
  done
done
pass "$n planted links (attempts/, attempts/<shard>/, state/done, state/locks, shards/ x worker, merge, status, retry, verify): exit 2, the link named, nothing written outside"

# ==== 1b. A link planted while the worker runs (after its manifest check): the done record's
# publication (fs layer, openat below the job folder) refuses it instead of writing outside.
cat >"$T/slow.sh" <<EOF
#!/bin/sh
touch "$T/running"
i=0; while [ ! -e "$T/planted" ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done
cp "\$1" "\$2"
EOF
for rel in state/done state/locks attempts; do
  J=$T/jobs/late-$(echo "$rel" | tr / _)
  rm -f "$T/running" "$T/planted"
  prep "$J" "sh $T/slow.sh {input} {output}"
  "$BIN" worker --job-dir "$J" >"$T/wout" 2>"$T/werr" & wpid=$!
  wait_for 30 test -e "$T/running"
  evil=$T/evil/late-$(echo "$rel" | tr / _); mkdir -p "$evil"
  mv "$J/$rel" "$T/moved-$$-$(echo "$rel" | tr / _)"; ln -s "$evil" "$J/$rel"
  touch "$T/planted"
  code=0; wait "$wpid" || code=$?
  [ "$code" = 2 ] || { cat "$T/werr"; fail "late link $rel: worker exited $code, not 2"; }
  grep -qF "$J/$rel" "$T/werr" && grep -qF "symbolic link" "$T/werr" || { cat "$T/werr"; fail "late link $rel: no message naming $J/$rel"; }
  grep -F "$J/$rel" "$T/werr" | head -1
  [ -z "$(ls -A "$evil")" ] || fail "late link $rel: the worker wrote into $evil: $(ls -A "$evil")"
done
pass "links planted while the worker runs (state/done, state/locks, attempts): exit 2, named, nothing written outside"

# ==== 2. Done records merge refuses: status agrees and names the record.
bad_record() {
  local name=$1 want=$2 J=$T/jobs/rec-$1
  prep "$J"; run_expect 0 "$BIN" worker --job-dir "$J"
  local rec=$J/state/done/$S0.json
  case $name in
    outside)   # a well-formed record whose output lies outside the job folder (same bytes)
      mkdir -p "$T/elsewhere"
      python3 - "$rec" "$J" "$T/elsewhere" <<'PY'
import json, os, shutil, sys
rec, job, dest = sys.argv[1:]
d = json.load(open(rec))
src = os.path.join(job, d["output_path"])
shutil.copy(src, os.path.join(dest, "x.jsonl"))
d["output_path"] = os.path.relpath(os.path.join(dest, "x.jsonl"), job)
tmp = rec + ".new"
json.dump(d, open(tmp, "w"))
os.replace(tmp, rec)
PY
      ;;
    notjson) printf 'not json\n' >"$rec" ;;
    link) mv "$rec" "$T/elsewhere-$S0.json"; ln -s "$T/elsewhere-$S0.json" "$rec" ;;
  esac
  run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/outs/rec-$name.jsonl"
  expect_err "$want"; expect_err "$S0"
  [ ! -e "$T/outs/rec-$name.jsonl" ] || fail "record $name: merge wrote its output"
  local code=0
  "$BIN" status --job-dir "$J" >"$T/out" 2>"$T/err" || code=$?
  [ "$code" != 0 ] || fail "record $name: status exits 0 for a job merge refuses"
  grep -qF "$S0" "$T/out" "$T/err" || fail "record $name: status does not name the record"
  run_expect "$code" "$BIN" status --job-dir "$J" --json
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["complete"] is False else 1)' "$T/out" ||
    fail "record $name: status --json says complete"
  expect_out "$S0"
}
bad_record outside "points outside the job folder"
bad_record notjson "Invalid JSON"
bad_record link "symbolic link"
pass "done records merge refuses (outside, not JSON, a link): status is not complete either and names the record"

# ==== 3. --job-dir is a regular file.
: >"$T/a-file"
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/a-file" --num-shards 2
expect_err "$T/a-file"; expect_err "is not a folder"
if grep -q "does not match" "$T/err"; then fail "prepare --job-dir <file> says the job does not match"; fi
pass "prepare --job-dir <a regular file>: is not a folder"

# ==== 4. Debris of killed prepares and merges.
# hold FLAG GO: a hook command that touches FLAG and waits (60 s at most) for GO to exist.
hold() { echo "touch $1; i=0; while [ ! -e $2 ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i+1)); done"; }
stages() { find "$T/deb" -maxdepth 1 -name ".$1.preparing.*" | sort; }
mkdir -p "$T/deb"
D=$T/deb/job
prep_bg() {  # prep_bg FLAG [WRAPPER...]: in the background ($!), a prepare of $D that waits once staged for $T/go
  local flag=$1; shift
  ESHARD_TEST_HOOK_PREPARE_STAGED="$(hold "$flag" "$T/go")" \
    "$@" "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$D" \
    --num-shards 2 --process-cmd "$CP" >/dev/null 2>&1 &
}
# A prepare SIGKILLed once staged leaves its stage folder.
rm -f "$T/go"
prep_bg "$T/staged1"; pid=$!; wait_for 30 test -e "$T/staged1"; kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
dead=$(stages job); [ -n "$dead" ] || fail "a killed prepare left no stage folder (test setup)"
# A dead one whose pid now belongs to another process (pid reuse): the same token but the pid
# of a live sleep; its start time says that process is not the maker.
sleep 120 </dev/null >/dev/null 2>&1 & sleeper=$!
reused=$T/deb/.job.preparing.$(printf '%08x' "$sleeper")$(basename "$dead" | sed 's/.*\.preparing\.........//')
cp -a "$dead" "$reused"
# Another host's dead one (its own host name): it cannot be checked from here.
prep_bg "$T/staged2" unshare --uts sh -c 'hostname node9 && exec "$@"' sh; pid=$!; wait_for 30 test -e "$T/staged2"
kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
other=$(comm -13 <(printf '%s\n%s\n' "$dead" "$reused" | sort) <(stages job)); [ -n "$other" ] || fail "no stage folder from node9 (test setup)"
# A live one (stopped in its hook until $T/go appears).
prep_bg "$T/staged3"; live_pid=$!; wait_for 30 test -e "$T/staged3"
live=$(comm -13 <(printf '%s\n%s\n%s\n' "$dead" "$reused" "$other" | sort) <(stages job))
[ -n "$live" ] || fail "no live stage folder (test setup)"
# The next successful prepare removes the dead one only, and says so in one line.
prep "$D"
[ ! -e "$dead" ] || fail "the killed prepare's stage folder $dead was not removed"
expect_err "removed $dead"
[ ! -e "$reused" ] || fail "a dead prepare's stage folder whose pid was reused ($reused) was not removed"
expect_err "removed $reused"
kill "$sleeper"; wait "$sleeper" 2>/dev/null || true
[ -d "$live" ] || fail "a live prepare's stage folder $live was removed"
[ -d "$other" ] || fail "another host's stage folder $other was removed"
expect_err "kept $other"
[ "$(grep -c "$live" "$T/err")" = 0 ] || { cat "$T/err"; fail "the live stage folder was mentioned"; }
touch "$T/go"; wait "$live_pid" || fail "the live prepare failed once let go"
[ ! -e "$live" ] || fail "the live prepare left its stage folder"
rm -rf "$other"
pass "prepare removes a killed prepare's stage folder (also when its pid was reused), keeps a live one and another host's"

# Merge: one SIGKILLed while merging leaves its output temporary; a live one is kept.
run_expect 0 "$BIN" worker --job-dir "$D"
O=$T/deb/merged.jsonl
merge_bg() {
  ESHARD_TEST_HOOK_MERGE_SHARD="$(hold "$1" "$T/go2")" \
    "$BIN" merge --job-dir "$D" --output "$O" >/dev/null 2>&1 &
}
temps() { find "$T/deb" -maxdepth 1 -name ".merged.jsonl.*.tmp" | sort; }
rm -f "$T/go2"
merge_bg "$T/merging1"; pid=$!; wait_for 30 test -e "$T/merging1"; kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
dead=$(temps); [ -n "$dead" ] || fail "a killed merge left no temporary (test setup)"
merge_bg "$T/merging2"; live_pid=$!; wait_for 30 test -e "$T/merging2"
live=$(comm -13 <(echo "$dead") <(temps)); [ -n "$live" ] || fail "no live merge temporary (test setup)"
run_expect 0 "$BIN" merge --job-dir "$D" --output "$O"
[ ! -e "$dead" ] || fail "the killed merge's temporary $dead was not removed"
expect_err "removed $dead"
[ -e "$live" ] || fail "a live merge's temporary $live was removed"
touch "$T/go2"; wait "$live_pid" || fail "the live merge failed once let go"
[ -z "$(temps)" ] || fail "temporaries left: $(temps)"
run_expect 0 "$BIN" merge --job-dir "$D" --output "$T/deb/ref.jsonl"
cmp -s "$O" "$T/deb/ref.jsonl" || fail "the merge let go wrote a different output"
[ "$(wc -l <"$O")" = 40 ] || fail "merged output has $(wc -l <"$O") rows, not 40"
pass "merge removes a killed merge's output temporary and keeps a live one"

# ==== 5. A takeover that loses the rename race (where flock() is local to one client, another
# host may move the stale lock first): a lost race, the worker claims the shard afresh and
# completes the job, rather than stopping with "cannot rename".
J=$T/jobs/race
rm -f "$T/running" "$T/planted"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 1 \
  --process-cmd "sh $T/slow.sh {input} {output}" --heartbeat-secs 0.5 --lease-secs 2 --poll-interval-secs 1
"$BIN" worker --job-dir "$J" >/dev/null 2>&1 & wpid=$!
wait_for 30 test -e "$T/running"
kill -KILL "$wpid"; wait "$wpid" 2>/dev/null || true
touch "$T/planted"
S=part-00000-of-00001
ESHARD_TEST_HOOK_BEFORE_TAKEOVER="mv $J/state/locks/$S.lock $J/state/stale_locks/$S.by-another-host.lock" \
  run_expect 0 "$BIN" worker --job-dir "$J" --no-backup
expect_out "All 1 shards completed"
if grep -q "cannot rename" "$T/err"; then fail "race: the lost rename was reported as an error"; fi
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/outs/race.jsonl"
cmp -s "$T/outs/race.jsonl" "$T/deb/ref.jsonl" || fail "race: merged output differs from a plain run's"
pass "a takeover whose rename finds the lock moved by another host: lost race, shard claimed afresh, job complete"
