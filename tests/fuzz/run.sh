#!/usr/bin/env bash
# Fuzz the readers with libFuzzer: tests/fuzz/run.sh TARGET|all SECONDS
#   TARGET: jsonl (line validator and encoder), manifest (manifest.json and the JSON under it),
#   record (done/failed records and fences), recipe (the YAML recipe reader), events (an event
#   log of a job folder, through jobview, status, metrics and the report); all: each in turn.
# Each target starts from its seed corpus: the inputs kept in tests/fuzz/corpus/<target>/
# (regressions of past findings among them) plus inputs made from tests/data and configs/.
# What it finds new goes to <work>/<target>/corpus (kept between runs); a crash, a leak, UB, a
# broken property, a timeout or an out-of-memory writes <work>/<target>/crash-* and fails.
# Prints each target's executions and final coverage (cov, ft) from libFuzzer's last lines.
# Environment: ESHARD_FUZZ_BIN_DIR: a fuzz build's folder (CTest sets it); without it the
# fuzz build in $ESHARD_FUZZ_BUILD_DIR (default <repo>/build-fuzz) is configured with clang
# and brought up to date first. ESHARD_FUZZ_WORK: the work folder (default <bin dir>/fuzz-work).
# ESHARD_FUZZ_JOBS: runs of all at the same time (default 1). ESHARD_FUZZ_NICE: the nice level
# of the fuzzers (default 19, to stay out of the way of other work; CTest sets 0).
# Exit: 0 when every target ran its time without a finding, 1 on a finding, 2 on bad usage.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
targets=(jsonl manifest record recipe events)
usage() { echo "usage: tests/fuzz/run.sh TARGET|all SECONDS (TARGET: ${targets[*]})" >&2; exit 2; }
[ $# -eq 2 ] || usage
case "$2" in ''|*[!0-9]*) usage ;; esac
[ "$2" -gt 0 ] || usage
secs=$2
if [ "$1" = all ]; then
  chosen=("${targets[@]}")
else
  [[ " ${targets[*]} " == *" $1 "* ]] || usage
  chosen=("$1")
fi

bin=${ESHARD_FUZZ_BIN_DIR:-}
if [ -z "$bin" ]; then
  bin=${ESHARD_FUZZ_BUILD_DIR:-$repo/build-fuzz}
  command -v clang >/dev/null || { echo "run.sh: clang not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
  cmake -S "$repo" -B "$bin" -DCMAKE_C_COMPILER=clang -DESHARD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$bin" -j"$(nproc)" --target eshard_fuzz >/dev/null
fi
work=${ESHARD_FUZZ_WORK:-$bin/fuzz-work}

# seeds TARGET DIR: fill DIR with the target's seed corpus.
seeds() {
  local t=$1 dir=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$repo/tests/fuzz/corpus/$t/"* "$dir/"
  case "$t" in
    jsonl)   # every line of the canonical fixture (without its '\n'), as its input and as its
             # expected form
      for f in input expected; do
        awk -v p="$dir/canon-$f-" '{ o = sprintf("%s%04d", p, NR); printf "%s", $0 > o; close(o) }' \
          "$repo/tests/data/canon/$f.jsonl"
      done ;;
    recipe)
      for f in "$repo"/configs/*.yaml; do cp "$f" "$dir/config-$(basename "$f")"; done ;;
  esac
}

# fuzz TARGET: one bounded run; 0 when it ended by time without a finding.
fuzz() {
  local t=$1 w=$work/$1 exe=$bin/fuzz_$1 rc=0
  [ -x "$exe" ] || { echo "run.sh: $exe is not built" >&2; return 1; }
  mkdir -p "$w/corpus"
  rm -f "$w"/crash-* "$w"/leak-* "$w"/timeout-* "$w"/oom-* "$w"/slow-unit-*
  seeds "$t" "$w/seeds"
  local dict=()
  case "$t" in
    jsonl|manifest|record|events) dict=(-dict="$repo/tests/fuzz/json.dict") ;;
    recipe) dict=(-dict="$repo/tests/fuzz/yaml.dict") ;;
  esac
  # -close_fd_mask=2: the targets' own stderr (warnings) is noise; libFuzzer and the
  # sanitizers still report on the descriptor libFuzzer keeps.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    nice -n "${ESHARD_FUZZ_NICE:-19}" "$exe" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=16384 \
      -print_final_stats=1 -close_fd_mask=2 "${dict[@]}" -artifact_prefix="$w/" \
      "$w/corpus" "$w/seeds" >"$w/log" 2>&1 || rc=$?
  local execs cov ft
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' "$w/log" | tail -1)
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' "$w/log" | tail -1)
  local found
  found=$(ls "$w" | grep -E '^(crash|leak|timeout|oom)-' || true)
  if [ "$rc" != 0 ] || [ -n "$found" ]; then
    grep -v '^#[0-9]' "$w/log" | tail -40 >&2
    echo "fuzz $t: FINDING (libFuzzer exit $rc) after ${execs:-?} executions: ${found:-see $w/log}" >&2
    return 1
  fi
  echo "fuzz $t: ${secs}s, $execs executions, cov $cov, ft $ft, no finding (corpus $(ls "$w/corpus" | wc -l) new inputs in $w/corpus)"
}

rc=0
jobs=${ESHARD_FUZZ_JOBS:-1}
if [ "$jobs" -gt 1 ] && [ ${#chosen[@]} -gt 1 ]; then
  pids=()
  for t in "${chosen[@]}"; do fuzz "$t" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
else
  for t in "${chosen[@]}"; do fuzz "$t" || rc=1; done
fi
exit "$rc"
