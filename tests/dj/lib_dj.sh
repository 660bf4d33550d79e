# Shared set-up of the dj tests: the real Data-Juicer + Ray environment (made when missing:
# a missing environment is a failure of the set-up, never a skipped test).
. "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
VENV=${ESHARD_DJ_VENV:-$SRC/.venv-dj}
bash "$SRC/scripts/setup-dj-env.sh" "$VENV" >/dev/null || fail "cannot set up the Data-Juicer environment in $VENV"
PY=$VENV/bin/python
DJ=$VENV/bin/dj-process
[ -x "$PY" ] && [ -x "$DJ" ] || fail "no python or dj-process in $VENV"
# Offline and quiet, as on a cluster without network.
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       PIP_NO_INDEX=1 UV_OFFLINE=1 RAY_DATA_DISABLE_PROGRESS_BARS=1
# No Ray process of ours may outlive a test.
# mine PATTERN: pid and command line of each process matching PATTERN (pgrep -f) whose
# environment names this test's folder (the job's cache folders are in the environment of every
# Ray head, runner and shard child the job starts), so that tests running beside this one (in
# another checkout, say) are neither counted nor signalled.
mine() {
  local p
  for p in $(pgrep -f -- "$1"); do
    [ "$p" != $$ ] && tr '\0' '\n' 2>/dev/null </proc/"$p"/environ | grep -qF -- "$T" &&
      printf '%s %s\n' "$p" "$(tr '\0' ' ' 2>/dev/null </proc/"$p"/cmdline)"
  done
  return 0
}
ray_procs() { pgrep -f -a 'raylet|gcs_server|ray::|default_worker.py' | grep -F -- "${1:-$T}" || true; }
