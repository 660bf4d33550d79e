#!/usr/bin/env bash
# Benchmark of prepare at scale (issue 30; README "Prepare at scale"). On one corpus (default
# 1000 MB), in one run so that the machine's load is the same for both:
#   - prepare --threads 2 against --threads 1, wall time, RUNS pairs (each pair back to back,
#     in alternating order); the median of the per-pair ratios (target on 2 cores <= 0.6) and
#     each side's median and CPU time;
#   - peak RSS of each (GNU time; target <= 64 MB per thread);
#   - the SHA-256 speed of this machine (openssl speed, as prepare: the CPU's SHA
#     instructions), the floor of the two hashes that stay sequential;
#   - with BIG_MB=10000 (say), one prepare of that much on the CPUs there are: wall, MB/s and
#     peak RSS (about twice its size of free disk under the work folder).
#
#   tests/bench/prepare.sh [SIZE_MB] [RUNS]        BIG_MB=10000 tests/bench/prepare.sh
# Uses the build in build/ (scripts/build.sh makes it) and a work folder under /tmp.
set -euo pipefail
size=${1:-1000}
runs=${2:-5}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
cat "$corpus" >/dev/null # warm the page cache once, so that every run reads the same way
bytes=$(stat -c %s "$corpus")

# prep THREADS FILE: one prepare into $work/job; "<wall> <user+sys> <peak RSS KB>" on stdout.
prep() {
  rm -rf "$work/job"
  sync
  /usr/bin/time -f '%e %U %S %M' -o "$work/time.txt" "$bin" prepare --config "$work/recipe.yaml" \
    --dataset-path "$2" --job-dir "$work/job" --num-shards 16 --threads "$1" --progress-secs 0 \
    >/dev/null 2>"$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
  read -r wall user sys rss <"$work/time.txt"
  echo "$wall $(python3 -c "print('%.2f' % ($user + $sys))") $rss"
}
ratio() { python3 -c "print('%.3f' % ($1 / $2))"; }

w1=() w2=() c1=() c2=() r1=() r2=() ratios=()
for i in $(seq "$runs"); do
  if [ $((i % 2)) = 1 ]; then read -r a ca ra < <(prep 1 "$corpus"); read -r b cb rb < <(prep 2 "$corpus")
  else read -r b cb rb < <(prep 2 "$corpus"); read -r a ca ra < <(prep 1 "$corpus"); fi
  w1+=("$a"); w2+=("$b"); c1+=("$ca"); c2+=("$cb"); r1+=("$ra"); r2+=("$rb")
  ratios+=("$(ratio "$b" "$a")")
  echo "pair $i: --threads 1 $a s (cpu $ca s), --threads 2 $b s (cpu $cb s), ratio ${ratios[-1]}"
done
t1=$(median "${w1[@]}")
echo "corpus: $bytes bytes, $(wc -l <"$corpus") rows, 16 shards, $runs pairs"
echo "--threads 1: median $t1 s ($(python3 -c "print('%.0f' % ($bytes / 1e6 / $t1))") MB/s), cpu $(median "${c1[@]}") s, peak RSS $(printf '%s\n' "${r1[@]}" | sort -n | tail -1) KB"
t2=$(median "${w2[@]}")
echo "--threads 2: median $t2 s ($(python3 -c "print('%.0f' % ($bytes / 1e6 / $t2))") MB/s), cpu $(median "${c2[@]}") s, peak RSS $(printf '%s\n' "${r2[@]}" | sort -n | tail -1) KB (target <= $((2 * 65536)) KB)"
echo "--threads 2 / --threads 1: median $(median "${ratios[@]}") (pairs: ${ratios[*]}; target <= 0.6)"

# SHA-256 of this machine: openssl speed on 1 MiB blocks, counted in CPU time (so that other
# load on a shared machine does not lower it), the CPU's SHA instructions as prepare uses them.
sha=$(openssl speed -bytes 1048576 -seconds 2 -evp sha256 2>/dev/null | awk '/^sha256/ { sub("k", "", $2); print $2 }')
echo "SHA-256: $(python3 -c "print('%.2f' % ($sha * 1e3 / 1e9))") GB/s on one core (the floor of the two sequential hashes)"

echo "mpirun -np 4 busiest rank CPU: not measured (run prepares on rank 0 alone, with --threads)"

if [ -n "${BIG_MB:-}" ]; then
  big=$work/corpus-$BIG_MB.jsonl
  [ -s "$big" ] || python3 "$repo/tests/bench/gen_corpus.py" "$big" "$BIG_MB" >/dev/null
  cpus=$(nproc)
  read -r wall cpu rss < <(prep "$cpus" "$big")
  bb=$(stat -c %s "$big")
  echo "$BIG_MB MB corpus, --threads $cpus: $wall s ($(python3 -c "print('%.0f' % ($bb / 1e6 / $wall))") MB/s), cpu $cpu s, peak RSS $rss KB ($((rss / cpus)) KB per thread; target <= 65536)"
fi
rm -rf "$work/job"
