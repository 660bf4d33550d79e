# shellcheck shell=bash
# Several "hosts" on one machine for the end-to-end tests: source it after lib.sh.
#
# Open MPI starts its daemon (orted) on every host of the hostfile through an rsh agent. Ours
# runs the command in a new UTS namespace whose hostname is the host's name, so each rank (and
# every processor it starts) sees gethostname() == node1, node2, ... while all of them really run
# here. They talk over the tcp BTL on loopback (lib.sh exports btl=self,tcp and the lo interface);
# the names never need to resolve, because every daemon connects back to mpirun's loopback URI.
# Checked with Debian 12's Open MPI 4.1.4. MPICH's hydra (MPI_FLAVOR=mpich from ranks.sh, source
# it first) starts its hydra_pmi_proxy through the same agent (-launcher rsh -launcher-exec), and
# MPICH 4.0.2's ranks on different fake hosts talk over loopback as well.
#
#   fakehosts_setup N         writes $T/fakehosts/{agent.sh,hostfile} with node1..nodeN (2 slots
#                             each) and exports:
#     FAKEHOSTS_HOSTFILE      the hostfile (mpirun's "node1 slots=2", hydra's "node1:2")
#     FAKEHOSTS_AGENT_ARGS    the launcher options that select the agent (no hostfile)
#     FAKEHOSTS_MPIRUN_ARGS   the hostfile + the agent options
#     FAKEHOSTS_PER_NODE_1    one rank per host: mpirun $FAKEHOSTS_MPIRUN_ARGS -np N $FAKEHOSTS_PER_NODE_1 ...
#
# FAKEHOSTS_HIDE="nodeK DIR" in mpirun's environment hides DIR on nodeK (an empty folder is
# mounted over it there): a node whose shared file system is not mounted.
# FAKEHOSTS_CACHEFS="BACKING MOUNTPOINT SECS" gives every host its own caching mount of BACKING
# at MOUNTPOINT (tests/e2e/cachefs.py), like NFS clients of one server; it needs
# OMPI_MCA_orte_leave_session_attached=1 too (no orted --daemonize, which would outlive the mount).
# FAKEHOSTS_GLUSTER="SERVER VOLUME MOUNTPOINT PIDDIR" gives every host its own GlusterFS client
# mount of VOLUME at MOUNTPOINT (tests/e2e/gluster.sh sets it up), the client's pid in
# PIDDIR/HOST.pid; it needs OMPI_MCA_orte_leave_session_attached=1 too.
#
# Paths under $T have no spaces, so the option strings can be split on whitespace.

fakehosts_setup() {
  local n=$1 d=$T/fakehosts i
  mkdir -p "$d/empty"
  cat >"$d/agent.sh" <<'EOF'
#!/bin/sh
# Fake rsh agent: "agent.sh HOST CMD..." runs CMD here under the hostname HOST. CMD is a shell
# command line, not just a program: mpirun started by its absolute path (as CTest's MPIEXEC is)
# sends "PATH=/usr/bin:$PATH ; export PATH ; ... /usr/bin/orted ...", so no "exec" before it.
h="$1"; shift
# FAKEHOSTS_HIDE="HOST DIR" (inherited from mpirun's environment): on HOST an empty folder is
# mounted over DIR in a private mount namespace, as if the shared file system were missing there.
if [ -n "${FAKEHOSTS_HIDE:-}" ] && [ "${FAKEHOSTS_HIDE%% *}" = "$h" ]; then
  exec unshare --uts --mount sh -c "hostname $h; mount --bind $(dirname "$0")/empty ${FAKEHOSTS_HIDE#* }; $*"
fi
# FAKEHOSTS_CACHEFS="BACKING MOUNTPOINT SECS": every host sees BACKING at MOUNTPOINT through its
# own caching mount (tests/e2e/cachefs-run.sh), like NFS clients of one server.
if [ -n "${FAKEHOSTS_CACHEFS:-}" ]; then
  set -- $FAKEHOSTS_CACHEFS "$*"
  exec unshare --uts sh -c "hostname $h; exec \"\$0\" \"\$1\" \"\$2\" \"\$3\" - /bin/sh -c \"\$4\"" \
    "$FAKEHOSTS_CACHEFS_RUN" "$1" "$2" "$3" "$4"
fi
# FAKEHOSTS_GLUSTER="SERVER VOLUME MOUNTPOINT PIDDIR": every host mounts the volume through its
# own GlusterFS client (tests/e2e/gluster-run.sh), whose pid goes to PIDDIR/HOST.pid.
if [ -n "${FAKEHOSTS_GLUSTER:-}" ]; then
  set -- $FAKEHOSTS_GLUSTER "$*"
  exec unshare --uts sh -c "hostname $h; exec \"\$0\" \"\$1\" \"\$2\" \"\$3\" \"\$4/$h.pid\" /bin/sh -c \"\$5\"" \
    "$FAKEHOSTS_GLUSTER_RUN" "$1" "$2" "$3" "$4" "$5"
fi
exec unshare --uts sh -c "hostname $h; $*"
EOF
  chmod +x "$d/agent.sh"
  : >"$d/hostfile"
  FAKEHOSTS_HOSTFILE=$d/hostfile
  FAKEHOSTS_CACHEFS_RUN=$SRC/tests/e2e/cachefs-run.sh
  FAKEHOSTS_GLUSTER_RUN=$SRC/tests/e2e/gluster-run.sh
  if [ "${MPI_FLAVOR:-openmpi}" = mpich ]; then
    for i in $(seq 1 "$n"); do echo "node$i:2" >>"$d/hostfile"; done
    FAKEHOSTS_AGENT_ARGS="-launcher rsh -launcher-exec $d/agent.sh"
    FAKEHOSTS_MPIRUN_ARGS="-f $d/hostfile $FAKEHOSTS_AGENT_ARGS"
    FAKEHOSTS_PER_NODE_1="-ppn 1"
  else
    for i in $(seq 1 "$n"); do echo "node$i slots=2" >>"$d/hostfile"; done
    # plm_rsh_no_tree_spawn: mpirun starts every daemon itself (no daemon-to-daemon ssh tree).
    FAKEHOSTS_AGENT_ARGS="--mca plm_rsh_agent $d/agent.sh --mca plm_rsh_no_tree_spawn 1"
    FAKEHOSTS_MPIRUN_ARGS="--hostfile $d/hostfile $FAKEHOSTS_AGENT_ARGS"
    FAKEHOSTS_PER_NODE_1="-npernode 1"
  fi
  export FAKEHOSTS_HOSTFILE FAKEHOSTS_AGENT_ARGS FAKEHOSTS_MPIRUN_ARGS FAKEHOSTS_PER_NODE_1 FAKEHOSTS_CACHEFS_RUN \
    FAKEHOSTS_GLUSTER_RUN
}

# fakehosts_check: fail early with a clear message when this machine cannot make namespaces.
fakehosts_check() {
  command -v unshare >/dev/null || fail "unshare (util-linux) is missing"
  [ "$(unshare --uts sh -c 'hostname es-probe && hostname' 2>&1)" = es-probe ] ||
    fail "cannot create a UTS namespace here (unshare --uts); the fake-host tests need root"
}
