#!/bin/sh
# cachefs-run.sh BACKING MOUNTPOINT SECS PIDFILE CMD [ARGS...]
#
# Runs CMD as one more "client" of a shared folder: in a mount namespace of its own, BACKING is
# mounted at MOUNTPOINT through cachefs.py (attribute, entry and negative-entry caches of SECS,
# locks local to this mount), CMD runs (its pid goes to PIDFILE unless that is "-"), and the
# mount goes when CMD ends. Exits with CMD's code (70 when the mount did not come up).
# CACHEFS_OPTS: more options of cachefs.py (--no-link).
here=$(cd "$(dirname "$0")" && pwd)
exec unshare --mount --propagation private /bin/sh -c '
here=$1 back=$2 mp=$3 secs=$4 pidfile=$5; shift 5
ready=$(mktemp -u /tmp/cachefs-ready.XXXXXX)
/usr/bin/python3 "$here/cachefs.py" "$back" "$mp" --cache "$secs" --ready "$ready" ${CACHEFS_OPTS:-} 2>>"${CACHEFS_LOG:-/dev/null}" &
fs=$!
i=0
while [ ! -e "$ready" ]; do
  i=$((i + 1))
  if [ "$i" -gt 400 ] || ! kill -0 "$fs" 2>/dev/null; then
    echo "cachefs-run: the caching mount of $back at $mp did not come up" >&2
    kill -KILL "$fs" 2>/dev/null
    exit 70
  fi
  sleep 0.025
done
rm -f "$ready"
"$@" &
p=$!
[ "$pidfile" = - ] || echo "$p" >"$pidfile"
trap "kill -TERM $p 2>/dev/null" TERM INT
while :; do
  wait "$p"
  rc=$?
  kill -0 "$p" 2>/dev/null || break
done
# A lazy unmount ends the daemon (its /dev/fuse read fails); SIGKILL if it does not go.
umount -l "$mp" 2>/dev/null || fusermount -u -z "$mp" 2>/dev/null
i=0
while kill -0 "$fs" 2>/dev/null && [ "$i" -lt 100 ]; do i=$((i + 1)); sleep 0.05; done
kill -KILL "$fs" 2>/dev/null
wait "$fs" 2>/dev/null
exit "$rc"' sh "$here" "$@"
