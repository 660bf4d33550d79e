# shellcheck shell=bash
# Per-rank exit codes and pids for the MPI end-to-end tests: source it after lib.sh.
#
# mpirun returns only one code for the whole job, so every rank runs under $T/rank.sh, which
# starts the real command, writes its pid to $T/ranks/pid.<rank> (for the kill tests), its
# hostname to host.<rank>, waits, and writes its exit code to rc.<rank>.
#
#   ranks_setup              writes $T/rank.sh; sets MPIRUN (from MPIEXEC, else mpirun)
#   ranks_reset              forgets the files of the last run
#   ranks_expect N CODE      exactly N ranks ran and each exited with CODE
#   ranks_wait_pids N SECS   waits until the N ranks wrote their pids
#
# The same tests run under Open MPI's mpirun and under MPICH's hydra (MPIEXEC=mpiexec.mpich, the
# CTest label mpich). Where the two launchers differ:
#   MPI_FLAVOR               openmpi or mpich, from the launcher's --version
#   MPI_EXPORT NAME          the launcher option that passes NAME to every rank (-x, -genvlist)
#   RANKS_NOABORT            see below
#   noabort_rc CODE          the launcher's own code for a RANKS_NOABORT run whose ranks exit CODE
#   MPI_KILLED_MSG           what the launcher prints (stdout or stderr) when a rank died of SIGKILL

MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
# Read whole, not piped into grep -q: grep exits at the first match, the launcher still writing
# dies of SIGPIPE, and pipefail would call the pipeline failed.
case $("$MPIRUN" --version 2>&1) in
  *HYDRA*) MPI_FLAVOR=mpich ;;
  *) MPI_FLAVOR=openmpi ;;
esac

# By default mpirun ends the whole job as soon as one rank exits with a non-zero code, even
# after MPI_Finalize: the other ranks, still tearing down, get SIGTERM and SIGKILL a second
# later, so their codes are lost (mpirun's own exit code is the first rank's). A run that checks
# every rank's code passes RANKS_NOABORT. Beware: with it mpirun exits 0 whatever the ranks
# return, and a rank killed under the wrapper leaves the job hanging, so the runs that check
# mpirun's code or kill a rank use the default.
#
# Hydra never ends the other ranks because one exited non-zero (only when one dies of a signal),
# and its own code is the bitwise OR of the ranks' codes: it needs no option, and a run whose
# ranks all exit CODE returns CODE.
if [ "$MPI_FLAVOR" = mpich ]; then
  export RANKS_NOABORT=""
  MPI_EXPORT=-genvlist
  MPI_KILLED_MSG="Killed (signal 9)"
else
  export RANKS_NOABORT="--mca orte_abort_on_non_zero_status 0"
  MPI_EXPORT=-x
  MPI_KILLED_MSG="exited on signal 9"
fi
noabort_rc() { if [ "$MPI_FLAVOR" = mpich ]; then echo "$1"; else echo 0; fi; }

ranks_setup() {
  # A binary linked against the other MPI would start as N singletons, each its own rank 0.
  local lib=openmpi
  local libs
  libs=$(ldd "$BIN")
  case $libs in *libmpich.so*) lib=mpich ;; esac
  case $lib/$libs in mpich/*libopen-pal*|mpich/*libmpi.so.40*) fail "$BIN mixes MPICH and Open MPI: $libs" ;; esac
  [ "$lib" = "$MPI_FLAVOR" ] ||
    fail "$BIN is linked against $lib but the launcher $MPIRUN is $MPI_FLAVOR's (set MPIEXEC to match)"
  mkdir -p "$T/ranks"
  cat >"$T/rank.sh" <<EOF
#!/bin/bash
r=\${OMPI_COMM_WORLD_RANK:-\${PMIX_RANK:-\${PMI_RANK:-\${SLURM_PROCID:-0}}}}
d=$T/ranks
hostname >"\$d/host.\$r"
# mpirun ends the other ranks (SIGTERM, SIGKILL 1 s later) as soon as one exits non-zero,
# even after MPI_Finalize; the rank itself has a handler and exits with its code, and this
# wrapper must survive the SIGTERM to record it. A trap (not an ignore) leaves the child's
# dispositions alone.
trap 'echo TERM >"\$d/term.\$r"' TERM
"\$@" &
pid=\$!
echo "\$pid" >"\$d/pid.\$r"
while :; do
  wait "\$pid"
  rc=\$?
  kill -0 "\$pid" 2>/dev/null || break
done
echo "\$rc" >"\$d/rc.\$r"
exit "\$rc"
EOF
  chmod +x "$T/rank.sh"
}

ranks_reset() { rm -f "$T"/ranks/rc.* "$T"/ranks/pid.* "$T"/ranks/host.* "$T"/ranks/term.*; }

ranks_expect() {
  local n=$1 want=$2 i got files
  files=$(find "$T/ranks" -name 'rc.*' | wc -l)
  [ "$files" = "$n" ] || { ls "$T/ranks" >&2; fail "expected $n rank exit codes, found $files"; }
  for i in $(seq 0 $((n - 1))); do
    [ -f "$T/ranks/rc.$i" ] || fail "rank $i recorded no exit code"
    got=$(cat "$T/ranks/rc.$i")
    [ "$got" = "$want" ] || fail "rank $i exited with $got, expected $want (all: $(cat "$T"/ranks/rc.* | tr '\n' ' '))"
  done
}

# ranks_span: seconds from the first rank's start to the last rank's exit (the wrapper's pid
# and rc files), one decimal. It leaves out mpirun's own start and end, which grow with the
# machine's load (23 s in all beside four other test runs) where the ranks' span does not.
ranks_span() {
  python3 -c 'import glob, os, sys; d = sys.argv[1]
s = min(os.stat(f).st_mtime for f in glob.glob(d + "/pid.*")); e = max(os.stat(f).st_mtime for f in glob.glob(d + "/rc.*"))
print(round(e - s, 1))' "$T/ranks"
}

# ranks_started N: at least N ranks have recorded their pid.
ranks_started() { [ "$(find "$T/ranks" -name 'pid.*' | wc -l)" -ge "$1" ]; }
ranks_wait_pids() { wait_for "$2" ranks_started "$1"; }
