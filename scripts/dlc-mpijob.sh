#!/usr/bin/env bash
# eshard-mpi on a PAI-DLC MPIJob: run this as the launcher's command.
#
#   scripts/dlc-mpijob.sh --config recipe.yaml --dataset-path /mnt/data/in --job-dir /mnt/shared/job-001 --num-shards 64 \
#     --python /mnt/shared/venv-dj/bin/python
#
# DLC writes /etc/mpi/hostfile with one line per worker; this starts one eshard-mpi rank per
# worker host (mpirun -np <hosts> -npernode 1 --bind-to none) and passes every argument to
# 'eshard-mpi run'. No binding: each rank runs its node's whole Data-Juicer pipeline and gives
# it every CPU of the worker's container (README "CPUs, GPUs and binding").
# --python is the Data-Juicer and Ray environment's Python on the workers (add --dj-process
# when dj-process is not on their PATH); a job submitted without it can be resubmitted with it
# and resumes (README "Resubmitting a job").
# The exit code is the job's (every rank exits with the same code).
#
# Environment:
#   ESHARD_HOSTFILE    hostfile to use (default /etc/mpi/hostfile)
#   ESHARD_BIN         the eshard-mpi binary (default: the one installed beside this script, else
#                      eshard-mpi on PATH, else this checkout's build)
#   ESHARD_MPIRUN      mpirun to use (default mpirun)
#   ESHARD_MPIRUN_ARGS extra mpirun arguments, split on whitespace (e.g. "--mca btl_tcp_if_include eth0")
set -euo pipefail

hostfile=${ESHARD_HOSTFILE:-/etc/mpi/hostfile}
if [ ! -r "$hostfile" ]; then
  echo "ERROR: hostfile not found or not readable: $hostfile (set ESHARD_HOSTFILE)" >&2
  exit 2
fi
# Distinct host names: the first word of every non-blank, non-comment line.
hosts=$(awk '!/^[[:space:]]*(#|$)/ { print $1 }' "$hostfile" | sort -u | wc -l)
if [ "$hosts" -lt 1 ]; then
  echo "ERROR: no hosts in $hostfile" >&2
  exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
bin=${ESHARD_BIN:-}
if [ -z "$bin" ]; then
  # Installed as <prefix>/share/eshard-mpi/dlc-mpijob.sh: the binary of the same install first.
  if [ "$(basename "$here")" = eshard-mpi ] && [ -x "$here/../../bin/eshard-mpi" ]; then
    bin=$(cd "$here/../../bin" && pwd)/eshard-mpi
  elif command -v eshard-mpi >/dev/null 2>&1; then bin=$(command -v eshard-mpi)
  elif [ -x "$repo/build/eshard-mpi" ]; then bin=$repo/build/eshard-mpi
  else echo "ERROR: eshard-mpi not found: put it on PATH, set ESHARD_BIN, or run scripts/build.sh" >&2; exit 2
  fi
fi

mpirun=${ESHARD_MPIRUN:-mpirun}
args=(--hostfile "$hostfile" -np "$hosts" -npernode 1 --bind-to none)
if [ "$(id -u)" -eq 0 ]; then
  # Containers on DLC run as root; Open MPI refuses that unless told.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2206
extra=(${ESHARD_MPIRUN_ARGS:-})
echo "dlc-mpijob: $hosts host(s) from $hostfile; starting one eshard-mpi rank per host" >&2
set +e
"$mpirun" "${args[@]}" "${extra[@]}" "$bin" run "$@"
rc=$?
set -e
exit "$rc"
