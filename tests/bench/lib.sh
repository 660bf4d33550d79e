# Shared set-up of the prepare benchmarks (prepare.sh, prepare_compressed.sh), sourced after
# they set size (MB) and runs: the release build (bin), the work folder (work, under /tmp or
# $ESHARD_BENCH_DIR), the synthetic corpus of that size (corpus, made once by gen_corpus.py),
# the one-mapper recipe ($work/recipe.yaml), and median.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$(bash "$repo/scripts/build.sh")
work=${ESHARD_BENCH_DIR:-/tmp/eshard-bench-prepare}
mkdir -p "$work"
corpus=$work/corpus-$size.jsonl
if [ ! -s "$corpus" ]; then
  python3 "$repo/tests/bench/gen_corpus.py" "$corpus" "$size" >/dev/null
fi
printf 'process:\n  - whitespace_normalization_mapper:\n' >"$work/recipe.yaml"
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
