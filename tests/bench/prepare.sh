#!/usr/bin/env bash
# Benchmark of prepare at scale (issue 30; README "Prepare at scale"). On one corpus (default
# 1000 MB), in one run so that the machine's load is the same for both:
#   - prepare --threads 2 against --threads 1, wall time, RUNS pairs (each pair back to back,
#     in alternating order); the median of the per-pair ratios (target on 2 cores <= 0.6) and
#     each side's median and CPU time;
#   - peak RSS of each (GNU time; target <= 64 MB per thread);
#   - the SHA-256 speed of this machine (openssl speed, as prepare: the CPU's SHA
#     instructions), the floor of the two hashes that stay sequential;
#   - `run` on 4 fake hosts (tests/e2e/fakehosts.sh) against `run` on one rank, RUNS pairs, each
#     --threads 1: the busiest rank's CPU time in prepare against the single rank's (the median
#     of the per-pair ratios, target <= 0.45), from the lines a test build prints with
#     ESHARD_TEST_PREPARE_RANKS (build-bench-hooks/; the work after prepare fails at once on
#     purpose: --process-cmd 'false ...', so that no merge runs);
#   - with BIG_MB=10000 (say), one prepare of that much on the CPUs there are: wall, MB/s and
#     peak RSS, and `run` on 4 fake hosts: the prepare's wall and each rank's peak RSS (about
#     three times its size of free disk under the work folder). The corpus is the SIZE_MB one
#     concatenated as often as it takes: the generator writes about 4 MB/s.
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


# ---- run on ranks: fake hosts need the test build's agent set-up (namespaces: root).
hbin=$(ESHARD_BUILD_DIR="$repo/build-bench-hooks" bash "$repo/scripts/build.sh" -DESHARD_TEST_HOOKS=ON)
T=$work SRC=$repo
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tests/e2e/fakehosts.sh
. "$repo/tests/e2e/fakehosts.sh"
fakehosts_setup 4
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ranked NP FILE: `run` on NP fake hosts; its ranks' lines "prepare rank R: ..., wall W s, cpu C
# s, peak rss K KiB" in $work/ranks.txt, and "<busiest CPU> <rank 0's wall> <largest RSS KB>"
# on stdout. The processor fails at once (exit 2 expected): only prepare is measured.
ranked() {
  rm -rf "$work/job"
  sync
  # shellcheck disable=SC2086
  ESHARD_TEST_PREPARE_RANKS=1 timeout 1800 mpirun $FAKEHOSTS_MPIRUN_ARGS -np "$1" -npernode 1 "$hbin" run \
    --config "$work/recipe.yaml" --dataset-path "$2" --job-dir "$work/job" --num-shards 16 --threads 1 \
    --progress-secs 0 --process-cmd 'false {input} {output}' --max-retries 0 >/dev/null 2>"$work/err.txt" || true
  grep '^prepare rank ' "$work/err.txt" | sort >"$work/ranks.txt" || true
  [ "$(wc -l <"$work/ranks.txt")" = "$1" ] || { cat "$work/err.txt" >&2; exit 1; }
  python3 - "$work/ranks.txt" <<'PY'
import re, sys
rows = [re.search(r"wall ([0-9.]+) s, cpu ([0-9.]+) s, peak rss (\d+)", l).groups() for l in open(sys.argv[1])]
print(max(float(c) for _, c, _ in rows), rows[0][0], max(int(k) for _, _, k in rows))
PY
}

n1=() n4=() nr=() m1=() m4=()
for i in $(seq "$runs"); do
  if [ $((i % 2)) = 1 ]; then read -r a aw _ < <(ranked 1 "$corpus"); read -r b bw _ < <(ranked 4 "$corpus")
  else read -r b bw _ < <(ranked 4 "$corpus"); read -r a aw _ < <(ranked 1 "$corpus"); fi
  n1+=("$a"); n4+=("$b"); m1+=("$aw"); m4+=("$bw"); nr+=("$(ratio "$b" "$a")")
  echo "pair $i: 1 rank cpu $a s (wall $aw s), 4 ranks busiest cpu $b s (wall $bw s; $(tr '\n' ';' <"$work/ranks.txt" | sed 's/prepare rank /rank /g')), ratio ${nr[-1]}"
done
echo "run -np 4 on fake hosts, --threads 1: busiest rank's prepare CPU median $(median "${n4[@]}") s against one rank's $(median "${n1[@]}") s: median ratio $(median "${nr[@]}") (pairs: ${nr[*]}; target <= 0.45); prepare wall median $(median "${m4[@]}") s against $(median "${m1[@]}") s"

if [ -n "${BIG_MB:-}" ]; then
  big=$work/corpus-$BIG_MB.jsonl
  if [ ! -s "$big" ]; then
    for _ in $(seq $(((BIG_MB + size - 1) / size))); do cat "$corpus"; done >"$big"
  fi
  bb=$(stat -c %s "$big")
  echo "$BIG_MB MB corpus: the $size MB one concatenated $(((BIG_MB + size - 1) / size)) times ($bb bytes)"
  cpus=$(nproc)
  read -r wall cpu rss < <(prep "$cpus" "$big")
  echo "prepare --threads $cpus: $wall s ($(python3 -c "print('%.0f' % ($bb / 1e6 / $wall))") MB/s), cpu $cpu s, peak RSS $rss KB ($((rss / cpus)) KB per thread; target <= 65536)"
  read -r cpu wall rss < <(ranked 4 "$big")
  echo "run -np 4 on fake hosts, --threads 1: prepare $wall s ($(python3 -c "print('%.0f' % ($bb / 1e6 / $wall))") MB/s), busiest rank cpu $cpu s, peak RSS per rank: $(sed 's/.*rank \([0-9]*\):.*peak rss \([0-9]*\) KiB/\1: \2 KB/' "$work/ranks.txt" | tr '\n' ' ')(target <= 65536 per thread)"
fi
rm -rf "$work/job"
