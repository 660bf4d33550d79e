#!/bin/bash
# scripts/soak.sh on a small repository of its own (a copy of the script and a .ci/run that
# records what it sees), so that each case takes a second:
#   - every run is in a fresh clone at the asked commit, with CI=true, no standard input and the
#     asked number of hogs beside it, and a passed run's clone is removed;
#   - the hogs are gone when the soak ends;
#   - the first failed run stops the soak (exit 1), its clone and log are kept and named;
#   - bad usage: exit 2, one ERROR line, no folder written.
. "$(dirname "$0")/lib.sh"

R=$T/repo
mkdir -p "$R/scripts" "$R/.ci"
cp "$SRC/scripts/soak.sh" "$R/scripts/soak.sh"
cat >"$R/.ci/run" <<EOF
#!/bin/bash
# What the run sees: its run number, commit, folder, CI, stdin, and the soak's hogs.
{
  echo "run \$ESHARD_SOAK_RUN"
  echo "commit \$(git rev-parse HEAD)"
  echo "dir \$PWD"
  echo "ci \$CI"
  if [ -e uncommitted ]; then echo "uncommitted yes"; else echo "uncommitted no"; fi
  if read -r -t 1 _; then echo "stdin yes"; else echo "stdin no"; fi
  echo "hogs \$(pgrep -x yes -P "\$ESHARD_SOAK_PID" | tr '\n' ' ')"
} >"$T/seen.\$ESHARD_SOAK_RUN"
echo "the suite ran"
[ "\$(cat fail-at 2>/dev/null)" != "\$ESHARD_SOAK_RUN" ] || { echo "FAIL: planted failure"; exit 3; }
EOF
g() { git -C "$R" -c user.name=t -c user.email=t@example.invalid "$@"; }
g init -q
g add -A && g commit -qm good
GOOD=$(g rev-parse HEAD)
echo 2 >"$R/fail-at"
g add -A && g commit -qm "fails at run 2"
BAD=$(g rev-parse HEAD)
g branch main-bad "$BAD"
g checkout -q "$GOOD"
SOAK=$R/scripts/soak.sh

# ---- three passing runs of the newer commit (while the checkout is at the older one)
echo 9 >"$R/uncommitted" # not committed: the clones must not have it
run_expect 0 bash "$SOAK" --runs 3 --hogs 2 --rev main-bad --out "$T/soak1" --command 'rm -f fail-at; bash .ci/run'
grep -qx "soak: 3 of 3 runs passed" "$T/out" || { cat "$T/out"; fail "no closing line"; }
[ "$(grep -c '^soak: run [123] passed in ' "$T/out")" = 3 ] || { cat "$T/out"; fail "not one line a run"; }
dirs=
for i in 1 2 3; do
  f=$T/seen.$i
  [ -f "$f" ] || fail "run $i did not run the command"
  grep -qx "run $i" "$f" || fail "run $i: ESHARD_SOAK_RUN: $(cat "$f")"
  grep -qx "commit $BAD" "$f" || fail "run $i did not test --rev main-bad: $(cat "$f")"
  grep -qx "ci true" "$f" || fail "run $i: CI is not true"
  grep -qx "stdin no" "$f" || fail "run $i had a standard input"
  grep -qx "uncommitted no" "$f" || fail "run $i has the checkout's uncommitted file"
  d=$(sed -n 's/^dir //p' "$f")
  [ "$d" = "$T/soak1/clone$i" ] || fail "run $i ran in $d, not a clone of its own"
  [ ! -e "$d" ] || fail "the clone of passed run $i is left: $d"
  [ -f "$T/soak1/run$i.log" ] && grep -q "the suite ran" "$T/soak1/run$i.log" || fail "run $i has no log"
  case " $dirs " in *" $d "*) fail "two runs in one clone" ;; esac
  dirs="$dirs $d"
  read -r -a h < <(sed -n 's/^hogs //p' "$f")
  [ "${#h[@]}" = 2 ] || fail "run $i saw ${#h[@]} hogs, not 2: $(cat "$f")"
  for p in "${h[@]}"; do ! kill -0 "$p" 2>/dev/null || fail "hog $p outlived the soak"; done
done
pass "3 runs, each in a fresh clone at --rev, CI=true, no stdin, 2 hogs beside it and gone after"

# ---- the first failure stops the soak; its clone is kept
rm -f "$T"/seen.*
run_expect 1 bash "$SOAK" --runs 5 --hogs 0 --rev "$BAD" --out "$T/soak2"
grep -qx "soak: run 2 of 5 failed after 1 passed" "$T/out" || { cat "$T/out"; fail "no failure line"; }
grep -q "^soak: run 2 exit 3 after .*clone kept in $T/soak2/clone2" "$T/out" || { cat "$T/out"; fail "the failed run is not named"; }
expect_out "FAIL: planted failure"
[ -d "$T/soak2/clone2/.git" ] || fail "the failed run's clone was removed"
[ ! -e "$T/soak2/clone1" ] || fail "the passed run's clone was kept"
[ -f "$T/seen.2" ] && [ ! -e "$T/seen.3" ] || fail "the soak did not stop at the failed run"
[ -z "$(sed -n 's/^hogs //p' "$T/seen.1" | tr -d ' ')" ] || fail "--hogs 0 started hogs"
pass "the first failed run stops the soak with exit 1, names its log and keeps its clone"

# ---- bad usage: exit 2, one ERROR line, nothing written
bad() {
  local why=$1; shift
  run_expect 2 bash "$SOAK" --out "$T/never" "$@"
  [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^ERROR: soak: .*$why" "$T/err" || { cat "$T/err"; fail "bad message for $*"; }
  [ ! -e "$T/never" ] || fail "$* wrote $T/never"
  [ ! -s "$T/out" ] || { cat "$T/out"; fail "$* printed to stdout"; }
}
bad "--runs must be" --runs 0
bad "--runs must be" --runs x
bad "--hogs must be" --hogs -1
bad "is not a commit" --rev no-such-branch
bad "unknown argument" --fast
bad "needs a value" --runs
bad "must not be empty" --command ''
mkdir "$T/full" && touch "$T/full/run1.log"
run_expect 2 bash "$SOAK" --out "$T/full"
grep -q "^ERROR: soak: --out $T/full is not empty" "$T/err" || { cat "$T/err"; fail "a used --out folder was accepted"; }
pass "bad usage exits 2 with one ERROR line and writes nothing"

run_expect 0 bash "$SOAK" --help
grep -q "^usage: scripts/soak.sh" "$T/out" || fail "--help has no usage line"
pass "--help"
