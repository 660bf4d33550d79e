#!/bin/bash
# Right after `mpirun -np 2 ... run --ray-mode per-rank` returns (no sleep), no Ray process of
# the job is left, not even as a zombie (ps lists one as raylet or gcs_server until its parent
# reaps it): each rank stops its node-local Ray head and waits until its processes are gone
# before it exits, so a scheduler or a container that ends with the job never kills a
# half-stopped Ray.
. "$(dirname "$0")/lib_dj.sh"
cd "$SRC"
our_ray() { mine 'eshard-ray-|dj_runner.py serve'; }

"$MPIEXEC" --oversubscribe -np 2 "$BIN" run --config configs/demo.yaml --dataset-path configs/demo-data \
  --job-dir "$T/job" --num-shards 2 --python "$PY" --dj-process "$DJ" --ray-mode per-rank >"$T/out" 2>"$T/err" &
mpi=$!
# The pids of the heads' daemons, seen while they run (a zombie's environment cannot be read,
# so it is found by its pid afterwards).
: >"$T/pids"
while kill -0 "$mpi" 2>/dev/null; do
  mine 'raylet|gcs_server' | cut -d' ' -f1 >>"$T/pids"
  sleep 0.5
done
rc=0; wait "$mpi" || rc=$?
left=$(for p in $(sort -u "$T/pids"); do [ ! -e /proc/"$p" ] || ps -o pid=,stat=,comm= -p "$p"; done)
ours=$(our_ray)
[ "$rc" = 0 ] || { cat "$T/out" "$T/err"; fail "mpirun exited $rc"; }
[ "$(sort -u "$T/pids" | wc -l)" -ge 4 ] || fail "expected a raylet and a gcs_server per rank, saw $(sort -u "$T/pids" | wc -l)"
[ -z "$left$ours" ] || { echo "$left"; echo "$ours"; fail "Ray processes left right after mpirun returned"; }
[ "$(grep -c 'Stopped the node-local Ray head' "$T/out")" = 2 ] || { cat "$T/out" "$T/err"; fail "expected each rank to stop its head"; }
if grep -F 'has not exited' "$T/err"; then fail "a rank warned of a Ray process left"; fi
pass "no Ray process left right after run returned"
