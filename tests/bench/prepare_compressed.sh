#!/usr/bin/env bash
# Benchmark: prepare of the 100 MB corpus into 16 shards, stored plain, as .jsonl.gz (gzip -6,
# the tool's default) and as .jsonl.zst (zstd -3, the tool's default). For each form it prints
# the median wall time of RUNS runs, the rate in MB/s of the decoded JSONL (the same 100 MB
# for all three, so the rates compare) and of the stored bytes, the median CPU time (user +
# system: on a loaded machine it tells the decoder's cost when the wall time cannot) and the
# peak RSS (GNU time).
# The shards of the compressed forms are checked byte-identical to the plain form's.
#
#   tests/bench/prepare_compressed.sh [SIZE_MB] [RUNS]
# Uses the build in build/ (or $ESHARD_BUILD_DIR; scripts/build.sh makes it) and a work folder
# under /tmp ($ESHARD_BENCH_DIR).
set -euo pipefail
size=${1:-100}
runs=${2:-3}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
[ -s "$corpus.gz" ] || gzip -6 -c "$corpus" >"$corpus.gz"
[ -s "$corpus.zst" ] || zstd -q -3 -c "$corpus" >"$corpus.zst"
decoded=$(stat -c %s "$corpus")
for form in plain gz zst; do
  input=$corpus
  [ "$form" = plain ] || input=$corpus.$form
  stored=$(stat -c %s "$input")
  cat "$input" >/dev/null # warm the page cache, so that every run reads the same way
  times=() rss=() cpu=()
  for i in $(seq "$runs"); do
    rm -rf "$work/job-$form"
    sync
    /usr/bin/time -f '%e %M %U %S' -o "$work/time.txt" "$bin" prepare --config "$work/recipe.yaml" \
      --dataset-path "$input" --job-dir "$work/job-$form" --num-shards 16 >/dev/null 2>"$work/err.txt" \
      || { cat "$work/err.txt"; exit 1; }
    read -r t m u sy <"$work/time.txt"
    times+=("$t"); rss+=("$m"); cpu+=("$(python3 -c "print('%.2f' % ($u + $sy))")")
  done
  if [ "$form" != plain ]; then
    for s in "$work/job-plain/shards/"*.jsonl; do
      cmp -s "$s" "$work/job-$form/shards/$(basename "$s")" || { echo "$form: shard $(basename "$s") differs" >&2; exit 1; }
    done
  fi
  t=$(median "${times[@]}")
  python3 - "$form" "$t" "$decoded" "$stored" "$(printf '%s\n' "${rss[@]}" | sort -n | tail -1)" "${times[*]}" "$(median "${cpu[@]}")" <<'PY'
import sys
form, t, decoded, stored, rss, runs, cpu = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
print("%-5s stored %9d bytes: median %.2f s, %6.1f MB/s decoded, %6.1f MB/s stored, CPU %s s, peak RSS %s KB (runs: %s s)"
      % (form, stored, t, decoded / 1e6 / t, stored / 1e6 / t, cpu, rss, runs))
PY
done
rm -rf "$work/job-plain" "$work/job-gz" "$work/job-zst"
