#!/bin/bash
# prepare checks the job folder's file system before it reads any input: a FUSE mount that
# refuses hard links (tests/e2e/cachefs.py --no-link, as object-storage mounts do) is refused
# with exit 2 and a message naming "hard links" and the folder, and nothing is left behind:
#   - a job folder to create inside the mount (the stage goes beside it, in the mount);
#   - the mount point itself as the job folder (an empty mount point: the stage goes inside);
# while the same mount with hard links is accepted and prepares the job.
. "$(dirname "$0")/lib.sh"
[ -c /dev/fuse ] || fail "/dev/fuse is missing: the FUSE file system needs it"
/usr/bin/python3 -c 'import fusepy' 2>/dev/null || fail "python3-fusepy is missing (scripts/install-deps.sh installs it)"
RUN=$SRC/tests/e2e/cachefs-run.sh
export CACHEFS_LOG=$T/cachefs.log

write_recipe "$T/recipe.yaml"
printf '{"id":%d,"text":"row %d"}\n' 1 1 2 2 3 3 4 4 >"$T/in.jsonl"
mkdir -p "$T/back" "$T/mnt"
PREP=("$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 2
      --process-cmd "cp {input} {output}")
empty_back() {
  [ -z "$(ls -A "$T/back")" ] || { ls -laR "$T/back"; fail "$1: prepare left files behind"; }
}

export CACHEFS_OPTS=--no-link
run_expect 2 "$RUN" "$T/back" "$T/mnt" 0 - "${PREP[@]}" --job-dir "$T/mnt/job"
expect_err "lacks hard links"
expect_err "$T/mnt"
[ "$(grep -c . "$T/err")" = 1 ] || { cat "$T/err"; fail "more than one line on stderr"; }
empty_back "a job folder inside the mount"
pass "a job folder on a mount without hard links: exit 2 naming hard links, nothing left"

run_expect 2 "$RUN" "$T/back" "$T/mnt" 0 - "${PREP[@]}" --job-dir "$T/mnt"
expect_err "The file system of $T/mnt lacks hard links"
empty_back "the mount point as job folder"
pass "the mount point itself as job folder: exit 2 naming hard links, nothing left"

unset CACHEFS_OPTS
run_expect 0 "$RUN" "$T/back" "$T/mnt" 0 - "${PREP[@]}" --job-dir "$T/mnt/job"
[ -f "$T/back/job/manifest.json" ] || fail "no job prepared on the mount with hard links"
[ -z "$(ls -A "$T/back/job" | grep probe)" ] || fail "the probe left files in the job folder"
pass "the same mount with hard links is accepted"
echo "PASS test_prepare_fs_probe"
