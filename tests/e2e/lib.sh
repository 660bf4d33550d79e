# Shared helpers for the end-to-end tests. Source it; it sets -euo pipefail.
set -euo pipefail

: "${ESHARD_BIN:?ESHARD_BIN must point at the eshard-mpi binary (run through ctest)}"
: "${ESHARD_SOURCE_DIR:?}"
BIN=$ESHARD_BIN
SRC=$ESHARD_SOURCE_DIR
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Keep Open MPI quiet and local: no interface probing warnings on a machine without a network.
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none

# ---- The test library, in the spirit of git's t/test-lib.sh. Each helper has one meaning:
#   check NAME CMD...     run CMD; count it passed or failed under NAME, and go on either way
#   pass TEXT             count a check the script made by itself as passed, and say so
#   fail TEXT             count a failure and end the test at once
#   wait_for SECS CMD...  poll CMD every 0.1 s until it succeeds; fail after SECS seconds
#   now                   the wall clock in seconds, with a fraction (for messages only)
#   test_done             the EXIT trap: print the counts, remove $T, fail if a check failed
# A pass/fail test waits for a condition with wait_for, never sleeps a fixed time to assert a
# duration afterwards: how long something takes is a figure for tests/bench/, where a busy
# machine makes it slower, not wrong.
ES_PASSED=0
ES_FAILED=0
check() {
  local name=$1; shift
  if "$@" >"$T/check.log" 2>&1; then
    ES_PASSED=$((ES_PASSED + 1))
    echo "ok: $name"
  else
    ES_FAILED=$((ES_FAILED + 1))
    sed 's/^/  | /' "$T/check.log" >&2
    echo "not ok: $name (failed: $*)" >&2
  fi
}
pass() { ES_PASSED=$((ES_PASSED + 1)); echo "ok: $*"; }
fail() { ES_FAILED=$((ES_FAILED + 1)); echo "FAIL: $*" >&2; exit 1; }
now() { local t=$EPOCHREALTIME; echo "${t/,/.}"; }
wait_for() {
  local secs=$1 end; shift
  end=$(( ${EPOCHREALTIME//[!0-9]/} + $(awk -v s="$secs" 'BEGIN { printf "%d", s * 1000000 }') ))
  until "$@"; do
    (( ${EPOCHREALTIME//[!0-9]/} < end )) || fail "timed out after $secs s waiting for: $*"
    sleep 0.1
  done
}
# A test that sets its own EXIT trap ends it with test_done. The trap keeps the script's own
# exit status unless a check failed.
test_done() {
  echo "# $ES_PASSED passed, $ES_FAILED failed: $(basename "$0")"
  if [ -z "${KEEP_TMP:-}" ]; then rm -rf "$T"; else echo "kept $T" >&2; fi
  if [ "$ES_FAILED" != 0 ]; then exit 1; fi
}

# A short fixed prefix: the reference fixture (test_prepare_fixture) needs a 22-byte input path.
T=$(mktemp -d /tmp/es.XXXXXX)
trap test_done EXIT

# The sanitizer build's options (CTest sets them: ESHARD_SANITIZER_ENV in CMakeLists.txt), for
# a command started under `env -i`: put "${SAN_ENV[@]}" after env -i to keep them (empty in
# other builds).
SAN_ENV=()
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
  if [ -n "${!v:-}" ]; then SAN_ENV+=("$v=${!v}"); fi
done
# need_test_hooks: crash points and test hooks exist only in a test build.
need_test_hooks() {
  [ "${ESHARD_TEST_HOOKS_BUILT:-0}" = 1 ] ||
    fail "this test needs a test build (cmake -DESHARD_TEST_HOOKS=ON; scripts/test.sh makes one)"
}

# run_expect CODE CMD...: run, capture stdout/stderr into $T/out and $T/err, check the exit code.
run_expect() {
  local want=$1; shift
  local got=0
  "$@" >"$T/out" 2>"$T/err" || got=$?
  if [ "$got" != "$want" ]; then
    echo "--- stdout"; cat "$T/out"; echo "--- stderr"; cat "$T/err"
    fail "expected exit $want, got $got: $*"
  fi
}
# expect_err TEXT: the last run's stderr contains TEXT (fixed string).
expect_err() { grep -qF -- "$1" "$T/err" || { cat "$T/err"; fail "stderr lacks: $1"; }; }
expect_out() { grep -qF -- "$1" "$T/out" || { cat "$T/out"; fail "stdout lacks: $1"; }; }
# no_stage DIR: neither the job folder nor any stage folder exists beside it.
no_job_left() {
  local job=$1 parent name
  parent=$(dirname "$job"); name=$(basename "$job")
  [ ! -e "$job" ] || fail "job folder $job was left behind"
  if compgen -G "$parent/.$name.preparing.*" >/dev/null; then fail "stage folder left behind in $parent"; fi
}
# A minimal recipe accepted without Data-Juicer (naming convention) and with it.
write_recipe() {
  cat >"$1" <<'YAML'
executor_type: ray
ray_address: local
process:
  - whitespace_normalization_mapper:
      index_key: global_index
YAML
}
# running_locks JOB: the locks of JOB that are not terminal fences (running or unreadable),
# one a line; a finished shard keeps its lock as a fence (status done or failed).
running_locks() {
  python3 - "$1" <<'PY'
import json, os, sys
d = os.path.join(sys.argv[1], "state", "locks")
for n in sorted(os.listdir(d)):
    try:
        st = json.load(open(os.path.join(d, n))).get("status", "running")
    except Exception:
        st = "unreadable"
    if st not in ("done", "failed"):
        print(n)
PY
}
# fence_counts JOB: "<done fences> <failed fences> <other locks>".
fence_counts() {
  python3 - "$1" <<'PY'
import json, os, sys
d = os.path.join(sys.argv[1], "state", "locks")
c = {"done": 0, "failed": 0, "other": 0}
for n in os.listdir(d):
    try:
        st = json.load(open(os.path.join(d, n))).get("status")
    except Exception:
        st = None
    c[st if st in ("done", "failed") else "other"] += 1
print(c["done"], c["failed"], c["other"])
PY
}
# exactly_once JOB [--fence] [--uncounted] [--stale-ok]: one done record per shard, whose token
# is the one attempt that says done (tests/e2e/exactly_once.py tells the options).
exactly_once() { python3 "$SRC/tests/e2e/exactly_once.py" "$@"; }
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$@"; }
