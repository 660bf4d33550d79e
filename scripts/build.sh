#!/usr/bin/env bash
# Configure and build eshard-mpi into build/ (or $ESHARD_BUILD_DIR). Extra args go to cmake.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${ESHARD_BUILD_DIR:-$repo/build}
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESHARD_TEST_HOOKS=OFF "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "$build/eshard-mpi"
