#!/usr/bin/env bash
# An existing job folder that holds no job (issue 27, item 4; README "An existing folder").
# 1. An empty folder is taken by one rename over it (its mode and group kept, no marker); a
#    re-prepare and a resubmitted `run` say "Job is already prepared and unchanged".
# 2. A folder holding anything else is refused: exit 2, one line naming how many entries and the
#    first five, nothing written in it or beside it.
# 3. A mount point (a tmpfs, in this test's own mount namespace) is taken by a stage inside it,
#    published under the marker .eshard-publish, manifest.json last; lost+found is left alone;
#    `run` under mpirun -np 2 works in one; one holding a file is refused. A folder whose parent
#    the user (nobody) cannot write, and prepare's own working folder (--job-dir .), are staged
#    inside too.
# 4. Crashes while staging inside and while publishing: no command takes the folder for a job,
#    and the next prepare takes it over or finishes that publish (even when asked for another
#    job, which it then refuses); the job's output is that of a job in a new folder.
# 5. Races: a prepare that staged while another published the same folder (empty folder, mount
#    point) says "already prepared", or refuses another request; nothing of its stage is left.
if [ -z "${ESHARD_JOBDIR_NS:-}" ]; then
  # Mounts made here vanish with the namespace, whatever happens to the test.
  exec unshare --mount --propagation private env ESHARD_JOBDIR_NS=1 bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
need_test_hooks
MPIRUN=${MPIEXEC:-mpirun}
MOUNTS=()
trap 'for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done; test_done' EXIT

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
CP='cp {input} {output}'
P=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --process-cmd "$CP")
prep() { run_expect "$1" "$BIN" prepare "${P[@]}" --num-shards "$2" --job-dir "$3"; }
# mnt DIR: a fresh tmpfs on DIR, the root of a file system as a volume's is.
mnt() { mkdir -p "$1"; mount -t tmpfs -o size=64m tmpfs "$1"; MOUNTS+=("$1"); }
# no_debris JOB: no stage folder or temporary inside the job folder nor beside it.
no_debris() {
  local d
  d=$(find "$1" "$(dirname "$1")" -maxdepth 1 \( -name '.*.preparing.*' -o -name '.*.tmp' \) | head -3)
  [ -z "$d" ] || fail "debris left: $d"
}
# same_output JOB: worker and merge give the output of the job prepared in a new folder.
same_output() {
  run_expect 0 "$BIN" worker --job-dir "$1"
  run_expect 0 "$BIN" merge --job-dir "$1" --output "$T/out.jsonl"
  cmp -s "$T/ref.jsonl" "$T/out.jsonl" || fail "$1: the merged output differs from a job in a new folder"
  rm -f "$T/out.jsonl"
}
# not_a_job JOB: every reader refuses the folder (no manifest.json yet).
not_a_job() {
  [ ! -e "$1/manifest.json" ] || fail "$1 has a manifest.json"
  run_expect 2 "$BIN" status --job-dir "$1"; expect_err "Job manifest not found: $1/manifest.json"
  run_expect 2 "$BIN" worker --job-dir "$1"; expect_err "Job manifest not found: $1/manifest.json"
}
snapshot() { (cd "$1" && find . -printf '%p %y %s %T@\n' | sort); }

prep 0 2 "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"

# ==== 1. An empty folder, made beforehand: one rename over it.
J=$T/made/job
mkdir -p "$J"
chgrp nogroup "$J"; chmod 2750 "$J"
prep 0 2 "$J"
expect_out "Prepared 2 shards from 40 records"
[ -f "$J/manifest.json" ] || fail "no manifest in the empty folder taken"
[ "$(stat -c '%a %G' "$J")" = "2750 nogroup" ] || fail "the folder's mode and group $(stat -c '%a %G' "$J") are not the 2750 nogroup it had"
[ ! -e "$J/.eshard-publish" ] || fail "a job published by a rename has a marker"
no_debris "$J"
prep 0 2 "$J"
expect_out "Job is already prepared and unchanged: $J"
prep 2 3 "$J"
expect_err "Job directory already exists and does not match this request: $J"
same_output "$J"
# A resubmitted run: prepare is a no-op, the job completes.
run_expect 0 "$MPIRUN" -np 1 "$BIN" run "${P[@]}" --num-shards 2 --job-dir "$J"
expect_out "Job is already prepared and unchanged: $J"
expect_out "PASS"
pass "an empty folder is taken by a rename, its mode and group kept; re-prepare and resubmitted run are no-ops"

# ==== 2. A folder holding something else: refused, what is there named, nothing written.
J=$T/notes
mkdir -p "$J/sub"
touch "$J/a.txt" "$J/b.txt" "$J/.hidden" "$J/c" "$J/d" "$J/e" "$J/f"
before=$(snapshot "$J"; ls -A "$T")
prep 2 2 "$J"
expect_err "ERROR: Job directory $J is not empty and holds no job (no manifest.json): 8 entries ('.hidden', 'a.txt', 'b.txt', 'c', 'd' and 3 more). Choose a new --job-dir, or an empty folder."
[ "$(grep -c '^ERROR' "$T/err")" = 1 ] || { cat "$T/err"; fail "the refusal is not one line"; }
if grep -q "does not match" "$T/err"; then fail "a folder that holds no job is said not to match"; fi
[ "$before" = "$(snapshot "$J"; ls -A "$T")" ] || fail "the refused prepare wrote something"
J=$T/one
mkdir "$J"; echo '{}' >"$J/x.jsonl"
prep 2 2 "$J"
expect_err "Job directory $J is not empty and holds no job (no manifest.json): 1 entry ('x.jsonl')."
[ "$(ls -A "$J")" = x.jsonl ] || fail "the refused prepare wrote into $J: $(ls -A "$J")"
no_debris "$J"
pass "a folder holding other files is refused with what is there, nothing written"

# ==== 3. Where a rename cannot work: a stage inside the folder.
M=$T/vol
mnt "$M"
mkdir "$M/lost+found"
prep 0 2 "$M"
expect_out "Prepared 2 shards from 40 records"
mountpoint -q "$M" || fail "$M is no longer a mount point"
grep -qxE "\.vol\.preparing\.[0-9a-f]{32}" "$M/.eshard-publish" || fail "the marker does not name a stage: $(cat "$M/.eshard-publish")"
[ -d "$M/lost+found" ] || fail "lost+found was removed"
no_debris "$M"
run_expect 1 "$BIN" status --job-dir "$M"
prep 0 2 "$M"
expect_out "Job is already prepared and unchanged: $M"
prep 2 3 "$M"
expect_err "Job directory already exists and does not match this request: $M"
same_output "$M"
# A mount point as the job folder of run, under mpirun -np 2, and its resubmission.
M=$T/vol2
mnt "$M"
run_expect 0 "$MPIRUN" -np 2 "$BIN" run "${P[@]}" --num-shards 2 --job-dir "$M"
expect_out "PASS"
cmp -s "$T/ref.jsonl" "$M/merged.jsonl" || fail "run on a mount point: output differs"
run_expect 0 "$MPIRUN" -np 2 "$BIN" run "${P[@]}" --num-shards 2 --job-dir "$M"
expect_out "Job is already prepared and unchanged: $M"
# A prepare that fails after staging inside (a blank line in the input) leaves the folder empty.
M=$T/vol3
mnt "$M"
printf '{"id": 1}\n\n' >"$T/blank.jsonl"
run_expect 2 "$BIN" prepare "${P[@]/$T\/in.jsonl/$T/blank.jsonl}" --num-shards 1 --job-dir "$M"
expect_err "Blank JSONL record at $T/blank.jsonl:2"
[ -z "$(ls -A "$M")" ] || fail "a failed prepare left something in the mount point: $(ls -A "$M")"
# A mount point that holds a file is refused like any folder.
echo data >"$M/data.bin"
prep 2 2 "$M"
expect_err "Job directory $M is not empty and holds no job (no manifest.json): 1 entry ('data.bin')."
[ "$(ls -A "$M")" = data.bin ] || fail "the refused prepare wrote into $M: $(ls -A "$M")"
# prepare's own working folder: a rename would leave this shell in the removed folder.
J=$T/here
mkdir "$J"
(cd "$J" && run_expect 0 "$BIN" prepare "${P[@]}" --num-shards 2 --job-dir .)
[ -f "$J/.eshard-publish" ] || fail "the working folder was not published inside"
[ -f "$J/manifest.json" ] || fail "no manifest in the working folder"
no_debris "$J"
same_output "$J"
# A folder made for the user in a parent that only root can write (the user: nobody).
chmod 0755 "$T"
chmod 0644 "$T/recipe.yaml" "$T/in.jsonl"
mkdir -p "$T/shared"
J=$T/shared/mine
mkdir "$J"; chown nobody "$J"
run_expect 0 setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$J" "$BIN" prepare "${P[@]}" \
  --num-shards 2 --job-dir "$J"
expect_out "Prepared 2 shards from 40 records"
[ -f "$J/.eshard-publish" ] && [ -f "$J/manifest.json" ] || fail "the folder in a read-only parent was not published inside"
[ "$(stat -c %U "$J/manifest.json")" = nobody ] || fail "the job was not written by the user"
no_debris "$J"
same_output "$J"
pass "a mount point, a folder in a parent the user cannot write and the working folder are staged inside"

# ==== 4. Crashes while staging inside and while publishing.
for point in prepare-after-scan prepare-publish-after-marker prepare-publish-before-manifest; do
  M=$T/crash-$point
  mnt "$M"
  run_expect 99 env ESHARD_TEST_CRASH_AT="$point" "$BIN" prepare "${P[@]}" --num-shards 2 --job-dir "$M"
  not_a_job "$M"
  prep 0 2 "$M"
  if [ "$point" = prepare-after-scan ]; then
    expect_out "Prepared 2 shards from 40 records"
    expect_err "WARNING: removed $M/.crash-$point.preparing."
  else
    expect_out "Job is already prepared and unchanged: $M"
    expect_err "WARNING: finished the publish of job folder $M from the stage $M/.crash-$point.preparing."
  fi
  no_debris "$M"
  same_output "$M"
done
# Killed while publishing, then asked for another job: that publish is finished, then refused.
M=$T/crash-other
mnt "$M"
run_expect 99 env ESHARD_TEST_CRASH_AT=prepare-publish-before-manifest "$BIN" prepare "${P[@]}" --num-shards 2 --job-dir "$M"
prep 2 3 "$M"
expect_err "WARNING: finished the publish of job folder $M"
expect_err "Job directory already exists and does not match this request: $M"
[ "$(json_get "$M/manifest.json" '["num_shards"]')" = 2 ] || fail "the finished job is not the killed prepare's"
no_debris "$M"
pass "crashes inside: never a job before its manifest; the next prepare takes over or finishes the publish"

# ==== 5. Races: prepare A stages, B publishes the same folder, then A goes on.
# hold FLAG GO: a hook command that touches FLAG and waits (60 s at most) for GO to exist.
hold() { echo "touch $1; i=0; while [ ! -e $2 ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i+1)); done"; }
# race JOB SHARDS_A CODE_A: A asks for SHARDS_A shards and must exit CODE_A; its output in $T/a.*.
race() {
  local job=$1 rc=0
  rm -f "$T/staged" "$T/go"
  ESHARD_TEST_HOOK_PREPARE_STAGED="$(hold "$T/staged" "$T/go")" \
    "$BIN" prepare "${P[@]}" --num-shards "$2" --job-dir "$job" >"$T/a.out" 2>"$T/a.err" &
  local a=$!
  wait_for 30 test -e "$T/staged"
  A_STAGE=$(find "$job" "$(dirname "$job")" -maxdepth 1 -name ".$(basename "$job").preparing.*")
  [ -n "$A_STAGE" ] || fail "no stage folder of the held prepare (test setup)"
  prep 0 2 "$job"
  expect_out "Prepared 2 shards from 40 records"
  touch "$T/go"
  wait "$a" || rc=$?
  [ "$rc" = "$3" ] || { cat "$T/a.out" "$T/a.err"; fail "race on $job: the prepare that lost exited $rc, not $3"; }
  [ ! -e "$A_STAGE" ] || fail "race on $job: the stage of the prepare that lost is left: $A_STAGE"
  [ "$(json_get "$job/manifest.json" '["num_shards"]')" = 2 ] || fail "race on $job: the job is not the winner's"
  no_debris "$job"
}
J=$T/race/empty
mkdir -p "$J"
race "$J" 2 0
grep -qF "Job is already prepared and unchanged: $J" "$T/a.out" || { cat "$T/a.out" "$T/a.err"; fail "the rename race's loser did not find the job"; }
same_output "$J"
M=$T/race/vol
mnt "$M"
race "$M" 2 0
grep -qF "Job is already prepared and unchanged: $M" "$T/a.out" || { cat "$T/a.out" "$T/a.err"; fail "the marker race's loser did not find the job"; }
[ "$(cat "$M/.eshard-publish")" != "$(basename "$A_STAGE")" ] || fail "the marker names the loser's stage"
same_output "$M"
M=$T/race/vol-other
mnt "$M"
race "$M" 3 2
grep -qF "Job directory already exists and does not match this request: $M" "$T/a.err" || { cat "$T/a.err"; fail "the marker race's loser with another request was not refused"; }
pass "races: one prepare publishes; the other finds its job (or refuses another request) and leaves nothing"
