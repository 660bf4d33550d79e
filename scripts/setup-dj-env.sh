#!/usr/bin/env bash
# Create (or check) the Data-Juicer + Ray virtual environment used by eshard-mpi's
# real processor tests and demos.
#
# Usage: scripts/setup-dj-env.sh [VENV_DIR]
#   VENV_DIR   default: $ESHARD_DJ_VENV, else <repo>/.venv-dj
# Environment:
#   ESHARD_DJ_VENV    venv directory when no argument is given
#   ESHARD_PYTHON     interpreter that creates the venv (default: python3; >= 3.10)
#   ESHARD_DJ_FORCE=1 run pip even when the venv already works
#
# Installs py-data-juicer and ray from PyPI with every package pinned by
# scripts/dj-constraints.txt (pip install -c). CPU only: no torch, no CUDA.
# Idempotent: when the venv already imports data_juicer and ray and has
# dj-process, it installs nothing and only prints the versions.
# Concurrent runs for the same VENV_DIR serialize on VENV_DIR/.eshard-setup.lock (flock).
#
# Last lines on stdout (for scripts to parse):
#   data_juicer <version>
#   ray <version>
#   python <venv>/bin/python
#   dj-process <venv>/bin/dj-process
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
constraints="$script_dir/dj-constraints.txt"

venv=${1:-${ESHARD_DJ_VENV:-$repo_root/.venv-dj}}
if [ "$#" -gt 1 ]; then
    echo "usage: $0 [VENV_DIR]" >&2
    exit 2
fi
case "$venv" in
    /*) ;;
    *) venv="$PWD/$venv" ;;
esac
base_python=${ESHARD_PYTHON:-python3}

log() { echo "setup-dj-env: $*" >&2; }
die() { echo "ERROR: $*" >&2; exit 1; }

[ -f "$constraints" ] || die "missing constraints file $constraints"

# The venv "works" when both packages (and sentencepiece, the tokenizer of
# Data-Juicer's tokenization options, which tests/dj/test_dj_models_sp.sh trains a
# real model with) import and the dj-process entry point
# exists. Sets $have to "<data_juicer version> <ray version>" (one interpreter
# start, about a second: importing data_juicer is the slow part).
have=
venv_works() {
    have=
    [ -x "$venv/bin/python" ] && [ -x "$venv/bin/dj-process" ] || return 1
    have=$("$venv/bin/python" -c 'import data_juicer, ray, sentencepiece; print(data_juicer.__version__, ray.__version__)' 2>/dev/null) || {
        have=
        return 1
    }
}

print_versions() {
    echo "data_juicer ${have% *}"
    echo "ray ${have#* }"
    echo "python $venv/bin/python"
    echo "dj-process $venv/bin/dj-process"
}

# Warn (do not reinstall) when a working venv has other versions than the pins.
check_pins() {
    local want_dj want_ray
    want_dj=$(sed -n 's/^py-data-juicer==//p' "$constraints")
    want_ray=$(sed -n 's/^ray==//p' "$constraints")
    if [ "$have" != "$want_dj $want_ray" ]; then
        log "WARNING: $venv has data_juicer/ray '$have', pinned '$want_dj $want_ray'; run with ESHARD_DJ_FORCE=1 or remove the venv to reinstall"
    fi
}

if [ "${ESHARD_DJ_FORCE:-0}" != 1 ] && venv_works; then
    check_pins
    print_versions
    exit 0
fi

mkdir -p "$venv"
lock="$venv/.eshard-setup.lock"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$lock"
    log "waiting for $lock"
    flock 9
    # Another run may have finished the install while we waited.
    if [ "${ESHARD_DJ_FORCE:-0}" != 1 ] && venv_works; then
        check_pins
        print_versions
        exit 0
    fi
fi

command -v "$base_python" >/dev/null 2>&1 || die "python interpreter '$base_python' not found (set ESHARD_PYTHON)"
"$base_python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
    die "$base_python is $("$base_python" -V 2>&1); py-data-juicer needs Python >= 3.10 (set ESHARD_PYTHON)"

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    log "creating venv $venv with $("$base_python" -V 2>&1) ($(command -v "$base_python"))"
    "$base_python" -m venv "$venv" ||
        die "cannot create a venv with $base_python (on Debian: apt-get install python3-venv)"
fi

log "installing py-data-juicer and ray pinned by $constraints"
# emoji and wget are published as sdists only; pip builds them (pure Python).
"$venv/bin/python" -m pip install --no-input --disable-pip-version-check \
    -c "$constraints" py-data-juicer ray sentencepiece >&2 ||
    die "pip install failed (see above)"
"$venv/bin/python" -m pip check >&2 || log "WARNING: pip check reports problems (see above)"

venv_works || die "venv $venv still does not import data_juicer and ray or lacks dj-process"
log "done in $(( $(date +%s) - start ))s"
check_pins
print_versions
