#!/usr/bin/env bash
# Install the Debian packages eshard-mpi needs to build and test, when they are missing.
# Idempotent: a machine that has them all is left alone (no apt-get update, no network).
set -euo pipefail

# clang libclang-rt-14-dev: the fuzz build (libFuzzer's runtime is in libclang-rt-14-dev,
# Debian 12's clang-14; tests/fuzz/run.sh).
# mpich libmpich-dev: the second tested MPI (build-mpich/); Debian gives Open MPI the higher
# alternatives priority, so mpirun, mpiexec and mpicc stay Open MPI's.
packages=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev mpich libmpich-dev libcjson-dev libyaml-dev
          libssl-dev zlib1g-dev libzstd-dev zstd gzip python3 python3-venv time util-linux procps locales
          slurm-wlm munge
          python3-fusepy fuse strace
          clang libclang-rt-14-dev
          dpkg-dev groff-base man-db bash-completion
          chromium fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
