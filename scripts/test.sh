#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every CTest test, then the MPI
# tests again against MPICH. Extra arguments go to both ctest runs (for example: scripts/test.sh
# -R test_run_np; with -L unit the MPICH run selects nothing).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/install-deps.sh"
# The test build: crash points and test hooks compiled in (a release build has none), in a
# folder of its own so that build/ stays a release build.
build=${ESHARD_BUILD_DIR:-$repo/build-test}
ESHARD_BUILD_DIR=$build bash "$repo/scripts/build.sh" -DESHARD_TEST_HOOKS=ON >/dev/null
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
rc=0
(cd "$build" && ctest --output-on-failure "$@") || rc=$?
echo "test: the MPICH build ($mpich_build, mpiexec.mpich)"
(cd "$mpich_build" && ctest --output-on-failure -L mpich "$@") || rc=$?
exit "$rc"
