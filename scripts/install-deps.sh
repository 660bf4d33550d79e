#!/usr/bin/env bash
# Install the Debian packages eshard-mpi needs, when they are missing.
#
#   scripts/install-deps.sh [--runtime | --test] [--list]
#
# --runtime: what building and running eshard-mpi needs (a C compiler, CMake, Open MPI, cJSON,
# libyaml, OpenSSL, zlib, zstd); --test (the default, which scripts/test.sh, scripts/demo.sh
# and .ci/run use): that and everything the tests need. --list prints the packages of the set,
# one a line, and installs nothing. Idempotent: a machine that has them all is left alone (no
# apt-get update, no network).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/install-deps.sh [--runtime | --test] [--list]

Install the Debian 12 packages eshard-mpi needs, those that are missing (apt-get, as root or
through sudo).

options:
  --runtime   only what building and running needs: compiler, CMake, Open MPI, cJSON, libyaml,
              OpenSSL, zlib, zstd (about 160 packages, 430 MiB on a minimal Debian 12)
  --test      everything the tests need too: MPICH, Slurm, FUSE, GlusterFS, clang, Chromium, ...
              (the default; about 400 packages, 1.6 GiB)
  --list      print the packages of the set, one a line, and install nothing
  -h, --help  this help
USAGE
}

# gcc libc6-dev make: the C compiler and make that CMake drives (no C++: the project is C).
runtime=(gcc libc6-dev make cmake pkg-config openmpi-bin libopenmpi-dev libcjson-dev libyaml-dev
         libssl-dev zlib1g-dev libzstd-dev)
# build-essential dpkg-dev: cpack's Debian package (test_install); zstd gzip: compressed inputs;
# python3 python3-venv: the Data-Juicer environment and the tests' Python;
# mpich libmpich-dev: the second tested MPI (build-mpich/); Debian gives Open MPI the higher
# alternatives priority, so mpirun, mpiexec and mpicc stay Open MPI's;
# clang libclang-rt-14-dev: the fuzz build (libFuzzer's runtime is in libclang-rt-14-dev,
# Debian 12's clang-14; tests/fuzz/run.sh);
# glusterfs-server glusterfs-client: a real distributed file system on one machine, for the
# tests labelled dfs (tests/e2e/gluster.sh).
test_only=(build-essential dpkg-dev zstd gzip python3 python3-venv time util-linux procps locales
           mpich libmpich-dev
           slurm-wlm munge
           python3-fusepy fuse strace
           glusterfs-server glusterfs-client
           clang libclang-rt-14-dev
           groff-base man-db bash-completion
           chromium fonts-dejavu-core)

set_name=test list=0
for a in "$@"; do
  case $a in
    --runtime | --test)
      if [ -n "${chosen:-}" ] && [ "$chosen" != "$a" ]; then
        echo "install-deps: give one of --runtime and --test, not both" >&2
        usage >&2
        exit 2
      fi
      chosen=$a set_name=${a#--} ;;
    --list) list=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install-deps: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
  esac
done
packages=("${runtime[@]}")
if [ "$set_name" = test ]; then
  packages+=("${test_only[@]}")
fi
if [ "$list" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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
