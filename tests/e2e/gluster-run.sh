#!/bin/sh
# gluster-run.sh SERVER VOLUME MOUNTPOINT PIDFILE CMD [ARGS...]
#
# Runs CMD as one more client of a GlusterFS volume: in a mount namespace of its own, VOLUME of
# SERVER is mounted at MOUNTPOINT by a glusterfs FUSE client kept in the foreground (its pid
# goes to PIDFILE, so that a test can kill this host's mount under a running worker), CMD runs,
# and the mount goes when CMD ends. Exits with CMD's code (70 when the mount did not come up).
# GLUSTER_CLIENT_LOG: the client's log file (default /dev/null).
# GLUSTER_NETNS="NETNS HOSTS" (gluster_netns_setup in gluster.sh): the client alone runs in the
# network namespace NETNS (a /proc/PID/ns/net), which reaches the server over a veth pair whose
# link a test can cut, with HOSTS bind-mounted over /etc/hosts in this mount namespace so that
# the server's name resolves to the server's end of that pair. CMD keeps this network (MPI
# is not cut).
exec unshare --mount --propagation private /bin/sh -c '
server=$1 vol=$2 mp=$3 pidfile=$4; shift 4
netns=
if [ -n "${GLUSTER_NETNS:-}" ]; then
  mount --bind "${GLUSTER_NETNS#* }" /etc/hosts || exit 70
  netns="nsenter --net=${GLUSTER_NETNS%% *}"
fi
$netns glusterfs -N --volfile-server="$server" --volfile-id="$vol" \
  --log-file="${GLUSTER_CLIENT_LOG:-/dev/null}" "$mp" &
fs=$!
echo "$fs" >"$pidfile"
i=0
# The mount is up when this namespace lists it and its root answers.
until grep -q " $mp fuse.glusterfs " /proc/self/mounts && stat "$mp" >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -gt 600 ] || ! kill -0 "$fs" 2>/dev/null; then
    echo "gluster-run: the client mount of $server:$vol at $mp did not come up" >&2
    kill -KILL "$fs" 2>/dev/null
    exit 70
  fi
  sleep 0.05
done
"$@" &
p=$!
trap "kill -TERM $p 2>/dev/null" TERM INT
while :; do
  wait "$p"
  rc=$?
  kill -0 "$p" 2>/dev/null || break
done
# A lazy unmount ends the client; SIGKILL if it does not go (a test may have killed it already).
umount -l "$mp" 2>/dev/null
i=0
while kill -0 "$fs" 2>/dev/null && [ "$i" -lt 100 ]; do i=$((i + 1)); sleep 0.05; done
kill -KILL "$fs" 2>/dev/null
wait "$fs" 2>/dev/null
exit "$rc"' sh "$@"
