#!/usr/bin/env bash
# Benchmark: prepare of a 100 MB corpus into 16 shards. Prints the median wall time of 5 runs
# and the peak RSS (GNU time). Targets on a 2-core machine: median <= 0.6 s, peak RSS <= 64 MB.
# Each run is paired with the I/O floor of what prepare must do at least, timed just before it:
# read and hash the input, write one copy and fsync it, hash the copy twice more (openssl, which
# uses the CPU's SHA instructions as prepare does); the median of the per-pair ratios is
# printed (target <= 1.25).
#
#   tests/bench/prepare.sh [SIZE_MB] [RUNS]
# Uses the build in build/ (scripts/build.sh makes it) and a work folder under /tmp.
set -euo pipefail
size=${1:-100}
runs=${2:-5}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
# Warm the page cache once so that every run reads the same way.
cat "$corpus" >/dev/null
times=() rss=() ratios=()
floor() {
  openssl dgst -sha256 "$corpus" >/dev/null
  cp "$corpus" "$work/floor.copy"
  sync "$work/floor.copy"
  openssl dgst -sha256 "$work/floor.copy" >/dev/null
  openssl dgst -sha256 "$work/floor.copy" >/dev/null
  rm -f "$work/floor.copy"
}
for i in $(seq "$runs"); do
  rm -rf "$work/job"
  f0=$(date +%s.%N); floor; f1=$(date +%s.%N)
  sync
  /usr/bin/time -f '%e %M' -o "$work/time.txt" "$bin" prepare --config "$work/recipe.yaml" \
    --dataset-path "$corpus" --job-dir "$work/job" --num-shards 16 >/dev/null 2>"$work/err.txt" \
    || { cat "$work/err.txt"; exit 1; }
  read -r t m <"$work/time.txt"
  times+=("$t"); rss+=("$m")
  ratios+=("$(python3 -c "print('%.3f' % ($t / ($f1 - $f0)))")")
  echo "run $i: floor $(python3 -c "print('%.3f' % ($f1 - $f0))") s, prepare $t s, ratio ${ratios[-1]}"
done
echo "corpus: $(stat -c %s "$corpus") bytes, $(wc -l <"$corpus") rows; runs: ${times[*]} s"
echo "prepare --num-shards 16: median $(median "${times[@]}") s (target <= 0.6 s)"
echo "prepare / floor: median $(median "${ratios[@]}") (pairs: ${ratios[*]}; target <= 1.25)"
echo "peak RSS: max $(printf '%s\n' "${rss[@]}" | sort -n | tail -1) KB (target <= 65536 KB)"
rm -rf "$work/job"
