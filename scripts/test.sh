#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every CTest test.
# Extra arguments go to ctest (for example: scripts/test.sh -L unit).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/install-deps.sh"
build=${ESHARD_BUILD_DIR:-$repo/build}
bash "$repo/scripts/build.sh" >/dev/null
# The dj-labelled tests run real Data-Juicer and Ray from this virtual environment.
export ESHARD_DJ_VENV=${ESHARD_DJ_VENV:-$repo/.venv-dj}
bash "$repo/scripts/setup-dj-env.sh" "$ESHARD_DJ_VENV" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
ctest --output-on-failure "$@"
