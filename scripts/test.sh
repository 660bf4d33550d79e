#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every CTest test once, then the
# MPI tests again against MPICH, then the fuzz targets for a short bounded time. Extra
# arguments go to every ctest run (for example: scripts/test.sh -R test_run_np; with -L unit
# the MPICH and fuzz runs select nothing).
#
# Which build runs what (each test runs once; the budget of the whole run on a 2-core CI
# machine is well under 20 minutes, and a second full e2e run would not fit in it):
#   build-asan/  the sanitizer build (ASan + UBSan, test hooks): THE build of the unit and e2e
#                tests, so every one of them also proves no leak, overflow or undefined
#                behaviour (CTest gives them ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS with
#                tests/lsan.supp; see ESHARD_SANITIZER_ENV in CMakeLists.txt);
#   build-test/  the plain test build (test hooks): the dj tests (real Data-Juicer and Ray,
#                whose own speed matters there) and test_install (label install: it packages
#                and installs that build);
#   build-mpich/ the MPI tests against MPICH (label mpich);
#   build-fuzz/  clang's libFuzzer targets of tests/fuzz, each fuzzed ESHARD_FUZZ_SECONDS
#                (default 15) from its seed corpus (label fuzz; tests/fuzz/run.sh for longer).
# The unit and e2e tests run ESHARD_TEST_JOBS (default 3) at a time: each e2e test has its own
# folders, fake hosts and mounts, and most of their time is spent waiting on leases, graces and
# children (one at a time they keep a 2-core machine at a load of about 0.7; three at a time,
# about 2.5, for 150 s instead of 420 s); CMakeLists.txt gives the long ones a COST so that
# they start first on a fresh clone too. The MPICH tests run as many at a time; the dj tests
# one at a time (each starts its own Ray heads, which take the CPU); the fuzz targets two at a
# time (a fuzz target is one process on one core).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/install-deps.sh"
t0=$(date +%s)
# The test build: crash points and test hooks compiled in (a release build has none), in a
# folder of its own so that build/ stays a release build.
build=${ESHARD_BUILD_DIR:-$repo/build-test}
ESHARD_BUILD_DIR=$build bash "$repo/scripts/build.sh" -DESHARD_TEST_HOOKS=ON >/dev/null
asan_build=${ESHARD_ASAN_BUILD_DIR:-$repo/build-asan}
ESHARD_BUILD_DIR=$asan_build bash "$repo/scripts/build.sh" -DESHARD_TEST_HOOKS=ON -DESHARD_SANITIZE=ON >/dev/null
# The dj-labelled tests run real Data-Juicer and Ray from this virtual environment.
export ESHARD_DJ_VENV=${ESHARD_DJ_VENV:-$repo/.venv-dj}
bash "$repo/scripts/setup-dj-env.sh" "$ESHARD_DJ_VENV" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The second configuration: the same sources against MPICH (install-deps.sh installs it beside
# Open MPI, which stays the default mpirun), in build-mpich/. Only the binary is built: the
# tests of that build labelled mpich are the ones that start ranks, run under mpiexec.mpich
# (CMakeLists.txt picks it: FindMPI alone would take Open MPI's mpiexec).
mpich_build=${ESHARD_MPICH_BUILD_DIR:-$repo/build-mpich}
cmake -S "$repo" -B "$mpich_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESHARD_TEST_HOOKS=ON \
  -DMPI_C_COMPILER=mpicc.mpich >/dev/null
cmake --build "$mpich_build" -j"$(nproc)" --target eshard-mpi >/dev/null
fuzz_build=${ESHARD_FUZZ_BUILD_DIR:-$repo/build-fuzz}
cmake -S "$repo" -B "$fuzz_build" -DCMAKE_C_COMPILER=clang -DESHARD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  ${ESHARD_FUZZ_SECONDS:+-DESHARD_FUZZ_SECONDS=$ESHARD_FUZZ_SECONDS} >/dev/null
cmake --build "$fuzz_build" -j"$(nproc)" --target eshard_fuzz >/dev/null
echo "test: builds ready in $(($(date +%s) - t0)) s"
rc=0
# step NAME DIR CTEST-ARGS...: one ctest run, timed.
step() {
  local name=$1 dir=$2 s
  shift 2
  s=$(date +%s)
  echo "test: $name ($dir)"
  (cd "$dir" && ctest --output-on-failure "$@") || rc=$?
  echo "test: $name took $(($(date +%s) - s)) s"
}
jobs=${ESHARD_TEST_JOBS:-3}
step "unit and e2e tests, sanitizer build, $jobs at a time" "$asan_build" -j"$jobs" -L '^(unit|e2e)$' -LE '^install$' "$@"
step "dj and install tests, test build" "$build" -L '^(dj|install)$' "$@"
step "the MPICH build (mpiexec.mpich)" "$mpich_build" -j"$jobs" -L mpich "$@"
step "fuzz targets (${ESHARD_FUZZ_SECONDS:-15} s each)" "$fuzz_build" -j2 -L fuzz "$@"
echo "test: all done in $(($(date +%s) - t0)) s"
exit "$rc"
