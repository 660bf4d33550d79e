#!/usr/bin/env bash
# The suite, again and again, from fresh clones and beside busy processes: the check that a
# change did not make a test flaky (issue 15: "5 fresh-clone runs in a row with a CPU hog").
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/soak.sh [--runs N] [--hogs K] [--rev REV] [--out DIR] [--command CMD]

Runs CMD (default: bash .ci/run, what CI runs) N times in a row, each time in a fresh clone of
this repository checked out at REV, beside K busy processes (`yes >/dev/null`), with CI=true and
no standard input, as CI does. Stops at the first failed run. Only committed work is tested:
uncommitted changes of this checkout are not in the clones.

  --runs N       runs in a row (default 5)
  --hogs K       busy processes beside the runs (default 2; 0 for a quiet machine)
  --rev REV      the commit to test (default HEAD); a branch, tag or commit of this repository
  --out DIR      where clones and logs go (default /tmp/eshard-soak-<commit>); it must be new or
                 empty. DIR/run<i>.log is run i's output; a passed run's clone is removed, a
                 failed run's clone DIR/clone<i> is kept to look at
  --command CMD  the command run in each clone by bash -c (default: bash .ci/run). It sees
                 ESHARD_SOAK_RUN (the run number) and ESHARD_SOAK_PID (this script's pid,
                 the hogs' parent)
  -h, --help     this text

Prints one line a run and a last line "soak: N of N runs passed" (exit 0) or "soak: run I of N
failed after P passed" (exit 1). Bad usage: exit 2, nothing written. A run of .ci/run takes
about 11 minutes on a quiet 2-core machine and about 20 beside two hogs.
EOF
}

die() { echo "ERROR: soak: $*" >&2; exit 2; }

runs=5 hogs=2 rev=HEAD out= cmd='bash .ci/run'
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --runs | --hogs | --rev | --out | --command)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --runs) runs=$2 ;; --hogs) hogs=$2 ;; --rev) rev=$2 ;; --out) out=$2 ;; --command) cmd=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]{0,3}$ ]] || die "--runs must be a whole number from 1 to 9999, not '$runs'"
[[ $hogs =~ ^[0-9]{1,3}$ ]] || die "--hogs must be a whole number from 0 to 999, not '$hogs'"
[ -n "$cmd" ] || die "--command must not be empty"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || die "$repo is not a git work tree"
commit=$(git -C "$repo" rev-parse --verify -q "$rev^{commit}") ||
  die "--rev '$rev' is not a commit of $repo"
short=${commit:0:12}
out=${out:-/tmp/eshard-soak-$short}
case $out in /*) ;; *) out=$PWD/$out ;; esac
if [ -e "$out" ]; then
  [ -d "$out" ] || die "--out $out exists and is not a folder"
  [ -z "$(ls -A "$out")" ] || die "--out $out is not empty (an earlier soak's logs?); give another folder"
fi
mkdir -p "$out"

pids=()
# Gone, not only signalled, when the soak ends.
stop_hogs() { [ ${#pids[@]} -eq 0 ] || { kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; } || true; }
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((h = 0; h < hogs; h++)); do
  yes >/dev/null &
  pids+=($!)
done
export ESHARD_SOAK_PID=$$

echo "soak: $runs run(s) of '$cmd' at $short from $repo beside $hogs hog(s); logs in $out"
for ((i = 1; i <= runs; i++)); do
  d=$out/clone$i log=$out/run$i.log
  git clone -q "$repo" "$d" 2>"$log" && git -C "$d" checkout -q "$commit" 2>>"$log" ||
    { cat "$log" >&2; die "cannot clone $repo at $short into $d"; }
  s=$(date +%s)
  rc=0
  (cd "$d" && CI=true ESHARD_SOAK_RUN=$i bash -c "$cmd") >>"$log" 2>&1 </dev/null || rc=$?
  took=$(($(date +%s) - s)) load=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ "$rc" -ne 0 ]; then
    echo "soak: run $i exit $rc after $took s (load $load); log $log, clone kept in $d"
    grep -E '\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception|Not Run|^FAIL|^ERROR' "$log" | head -20 | sed 's/^/  /' || true
    echo "soak: run $i of $runs failed after $((i - 1)) passed"
    exit 1
  fi
  rm -rf "$d"
  echo "soak: run $i passed in $took s (load $load); log $log"
done
echo "soak: $runs of $runs runs passed"
