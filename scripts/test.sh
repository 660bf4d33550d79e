#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every CTest test.
# Extra arguments go to ctest (for example: scripts/test.sh -L unit).
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
cd "$build"
ctest --output-on-failure "$@"
