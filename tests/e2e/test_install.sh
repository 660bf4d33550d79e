#!/bin/bash
# eshard-mpi as an installed tool: --version, "did you mean" hints, `cmake --install` into a
# scratch prefix (moved elsewhere afterwards: nothing may point back at the source tree), the
# .deb from `cpack -G DEB` unpacked with `dpkg -x` and a real 2-rank job under mpirun from it,
# its man page and bash completion, and the exit codes of README's table against every
# command's --help and against what the commands do.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
BUILD=$(dirname "$BIN")
[ -f "$BUILD/CPackConfig.cmake" ] || fail "no CPackConfig.cmake in $BUILD"
for t in cpack dpkg dpkg-deb groff man; do
  command -v "$t" >/dev/null || fail "$t is missing (scripts/install-deps.sh installs it)"
done
BASH_COMPLETION=/usr/share/bash-completion/bash_completion
[ -f "$BASH_COMPLETION" ] || fail "bash-completion is missing (scripts/install-deps.sh installs it)"
ranks_setup

# ---- --version and the hints
version=$(sed -n 's/^project(eshard_mpi VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$version" ] || fail "no project(... VERSION) in CMakeLists.txt"
run_expect 0 "$BIN" --version
line=$(cat "$T/out")
[[ $line =~ ^eshard-mpi\ ${version//./\\.}\ \(git\ ([0-9A-Za-z._+-]+)\)$ ]] || fail "bad --version line: $line"
rev=${BASH_REMATCH[1]}
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  want=$(git -C "$SRC" describe --always)
  [ "${rev%-dirty}" = "$want" ] || fail "--version names revision $rev, the checkout is at $want"
fi
commands=$("$BIN" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
case " $(echo $commands) " in *" status "*) ;; *) fail "no command list in --help: $commands" ;; esac
for c in $commands; do
  run_expect 0 "$BIN" "$c" --version
  [ "$(cat "$T/out")" = "$line" ] || fail "$c --version: $(cat "$T/out")"
done
run_expect 2 "$BIN" stauts
expect_err "ERROR: unknown command 'stauts' (did you mean 'status'?)"
run_expect 2 "$BIN" nonsense
expect_err "ERROR: unknown command 'nonsense' (see eshard-mpi --help)"
run_expect 2 "$BIN" status --job-dri "$T"
expect_err "ERROR: eshard-mpi status: unknown option '--job-dri' (did you mean --job-dir?)"
run_expect 2 "$BIN" run --num-shard 2
expect_err "ERROR: eshard-mpi run: unknown option '--num-shard' (did you mean --num-shards?)"
run_expect 2 "$BIN" verify --bogus
expect_err "ERROR: eshard-mpi verify: unknown option '--bogus' (see eshard-mpi verify --help)"
pass "--version ($line) and did-you-mean hints"

# ---- exit codes: README's table agrees with every command's --help.
# codes TEXT: the codes a text names, sorted: the numbers after "Exit codes:" or "the same
# code:", and 128+signal anywhere.
codes() {
  python3 -c '
import re, sys
t = " ".join(sys.argv[1].split())
found = set()
if "128+signal" in t:
    found.add("128+signal")
m = re.search(r"(?:Exit codes:|the same code:)(.*)", t)
if m:
    found.update(re.findall(r"(?<![\w+-])(\d+)(?![\w+])", m.group(1).replace("128+signal", "")))
print(" ".join(sorted(found)))' "$1"
}
for c in $commands; do
  row=$(grep -E "^\| \`$c\` \|" "$SRC/README.md" | awk -F'|' '{print $4}')
  [ -n "$row" ] || fail "README's Commands table has no row for $c"
  readme=$(codes "Exit codes: $row")
  help=$(codes "$("$BIN" "$c" --help | sed -n '/^options:/,$p' | sed '/^  --/d')")
  [ -n "$help" ] || fail "$c --help names no exit codes"
  [ "$readme" = "$help" ] || fail "exit codes of $c: README says '$readme', --help says '$help'"
done
pass "README's exit codes agree with every --help"

# ---- cmake --install into a scratch prefix, then moved: the tree must be relocatable
cmake --install "$BUILD" --prefix "$T/inst" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install"; }
for f in bin/eshard-mpi share/eshard-mpi/dj_op_kinds.py share/eshard-mpi/dj_runner.py \
         share/eshard-mpi/dlc-mpijob.sh share/eshard-mpi/slurm-eshard.sbatch \
         share/man/man1/eshard-mpi.1 share/bash-completion/completions/eshard-mpi share/doc/eshard-mpi/README.md \
         share/doc/eshard-mpi/README_ZH.md; do
  [ -f "$T/inst/$f" ] || fail "cmake --install did not install $f"
done
for f in bin/eshard-mpi share/eshard-mpi/dj_op_kinds.py share/eshard-mpi/dj_runner.py share/eshard-mpi/dlc-mpijob.sh; do
  [ -x "$T/inst/$f" ] || fail "$f is not executable"
done
mv "$T/inst" "$T/moved"
ROOT=$T/moved

# A recipe and canonical input (the cp processor changes nothing, so the merged output is the
# input byte for byte).
cat >"$T/recipe.yaml" <<'YAML'
executor_type: ray
process:
  - whitespace_normalization_mapper:
YAML
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "\u00e9" * (i % 5)}, ensure_ascii=False,
                           separators=(",", ":")) + "\n")
PY
# The "Python" that prepare asks about the operators: it records which helper it was given.
cat >"$T/py" <<EOF
#!/bin/sh
echo "\$1" >>"$T/py.log"
exec python3 "\$@"
EOF
chmod +x "$T/py"

# job ROOT_BIN JOB: a 2-rank job from that binary, every rank's code and the output checked.
job() {
  local bin=$1 j=$2
  rm -f "$T/py.log"
  ranks_reset
  run_expect 0 env -i "${SAN_ENV[@]}" PATH=/usr/bin:/bin HOME="$T" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,tcp \
    OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none \
    timeout 120 "$MPIRUN" $RANKS_NOABORT -np 2 "$T/rank.sh" "$bin" run --config "$T/recipe.yaml" \
    --dataset-path "$T/in.jsonl" --job-dir "$j" --num-shards 4 --python "$T/py" \
    --process-cmd 'cp {input} {output}' --poll-interval-secs 1
  ranks_expect 2 0
  expect_out "PASS: 4 shards were completed by 1 node(s); merged 60 rows into $j/merged.jsonl"
  cmp "$T/in.jsonl" "$j/merged.jsonl" || fail "merged output differs from the input"
  # The helper came from the installed share/eshard-mpi beside the binary, not the checkout.
  [ "$(cat "$T/py.log")" = "$(dirname "$bin")/../share/eshard-mpi/dj_op_kinds.py" ] ||
    fail "the registry helper was $(cat "$T/py.log"), not the installed one beside $bin"
  # A command job prints none of the recipe's Data-Juicer warnings.
  if grep -F "registry was not consulted" "$T/err"; then fail "a command job printed a Data-Juicer warning"; fi
}
(cd "$T" && job "$ROOT/bin/eshard-mpi" "$T/job-inst") || exit 1
pass "cmake --install: a 2-rank job from a moved prefix, helpers from its share/eshard-mpi"

# The installed launcher starts the binary installed beside it (none on PATH).
echo "localhost slots=2" >"$T/hosts"
run_expect 0 env -i "${SAN_ENV[@]}" PATH=/usr/bin:/bin HOME="$T" ESHARD_HOSTFILE="$T/hosts" \
  ESHARD_MPIRUN_ARGS="--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo" \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 120 bash "$ROOT/share/eshard-mpi/dlc-mpijob.sh" --config "$T/recipe.yaml" \
  --dataset-path "$T/in.jsonl" --job-dir "$T/job-dlc" --num-shards 2 --python "$T/py" \
  --process-cmd 'cp {input} {output}' --poll-interval-secs 1
expect_out "PASS: 2 shards were completed by 1 node(s); merged 60 rows into $T/job-dlc/merged.jsonl"
pass "the installed dlc-mpijob.sh runs the installed binary"

# A binary outside its build tree and outside an installed prefix has no helper: prepare
# says so rather than reading the checkout.
mkdir -p "$T/lone"
cp "$BIN" "$T/lone/eshard-mpi"
rm -f "$T/py.log"
run_expect 0 "$T/lone/eshard-mpi" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --job-dir "$T/job-lone" --num-shards 2 --python "$T/py"
expect_err "Data-Juicer registry was not consulted (no registry helper is configured)"
[ ! -e "$T/py.log" ] || fail "a lone binary ran a helper: $(cat "$T/py.log")"
pass "a binary outside the build tree never falls back to the source tree"

# ---- the .deb
arch=$(dpkg --print-architecture)
mkdir -p "$T/pkg"
(cd "$T/pkg" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$T/pkg") >"$T/cpack.log" 2>&1 ||
  { cat "$T/cpack.log"; fail "cpack -G DEB"; }
DEB=$T/pkg/eshard-mpi_${version}_${arch}.deb
[ -f "$DEB" ] || { ls "$T/pkg"; fail "no $DEB"; }
[ "$(dpkg-deb -f "$DEB" Package)" = eshard-mpi ] || fail "package name"
[ "$(dpkg-deb -f "$DEB" Version)" = "$version" ] || fail "package version"
[[ $(dpkg-deb -f "$DEB" Maintainer) == *@* ]] || fail "no maintainer"
depends=$(dpkg-deb -f "$DEB" Depends)
for d in libc6 libcjson1 libyaml-0-2 libssl3 libopenmpi3 openmpi-bin python3; do
  [[ ", $depends," =~ [,\ ]$d[\ ,] ]] || fail "Depends lacks $d: $depends"
done
dpkg -x "$DEB" "$T/droot"
R=$T/droot/usr
for f in bin/eshard-mpi share/eshard-mpi/dj_op_kinds.py share/eshard-mpi/dj_runner.py \
         share/man/man1/eshard-mpi.1 share/bash-completion/completions/eshard-mpi \
         share/bash-completion/completions/mpirun share/bash-completion/completions/mpiexec; do
  [ -f "$R/$f" ] || fail "the .deb lacks /usr/$f"
done
(cd "$T" && job "$R/bin/eshard-mpi" "$T/job-deb") || exit 1
pass ".deb $(basename "$DEB") ($(stat -c %s "$DEB") bytes; Depends: $depends): a 2-rank job from dpkg -x"

# ---- the man page lists every command and every option of the unpacked binary
groff -man -Tutf8 -ww -z "$R/share/man/man1/eshard-mpi.1" 2>"$T/groff.err" || fail "groff failed"
[ ! -s "$T/groff.err" ] || { cat "$T/groff.err"; fail "groff warnings"; }
MANWIDTH=200 man -l "$R/share/man/man1/eshard-mpi.1" >"$T/man.txt" 2>"$T/man.err" || { cat "$T/man.err"; fail "man -l"; }
grep -q "^NAME" "$T/man.txt" && grep -q "^COMMANDS" "$T/man.txt" || fail "man page lacks sections"
# EXAMPLES: a run under mpirun, status, retry and report, each with options its command has
# (gen-docs.py refuses others).
sed -n '/^EXAMPLES/,/^EXIT STATUS/p' "$T/man.txt" >"$T/examples.txt"
for e in "mpirun -np 4 -npernode 1 --bind-to none eshard-mpi run --config" "eshard-mpi status --job-dir" \
         "eshard-mpi retry --job-dir" "eshard-mpi report --job-dir" "--python /opt/venv-dj/bin/python"; do
  grep -qF -- "$e" "$T/examples.txt" || { cat "$T/examples.txt"; fail "the man page's EXAMPLES lack '$e'"; }
done
grep -qF "$line" "$T/man.txt" || fail "man page lacks the version"
n_opts=0
for c in $commands; do
  grep -qE "^ +eshard-mpi $c \[options\]" "$T/man.txt" || fail "man page lacks command $c"
  # This command's section: from its heading to the next one.
  sed -n "/^ *eshard-mpi $c \[options\]/,/^ *eshard-mpi [a-z]* \[options\]\|^EXIT STATUS/p" "$T/man.txt" >"$T/sect.txt"
  for o in $("$R/bin/eshard-mpi" "$c" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p'); do
    grep -qE "^ +$o( |$)" "$T/sect.txt" || fail "man page lacks $c $o"
    n_opts=$((n_opts + 1))
  done
done
pass "man page renders (man -l, groff without warnings): $(echo $commands | wc -w) commands, $n_opts options"

# ---- bash completion: loaded by bash-completion's own loader from the unpacked tree
comp() { # WORDS...: the completions of the last word, sorted, one line
  PATH="$R/bin:/usr/bin:/bin" XDG_DATA_DIRS="$R/share" bash --norc --noprofile -c '
    . '"$BASH_COMPLETION"'
    __load_completion eshard-mpi || { echo "no completion loaded"; exit 1; }
    complete -p eshard-mpi >&2
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
    _eshard_mpi
    printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' comp "$@"
}
comp eshard-mpi st 2>"$T/comp.err" >"$T/comp.out" || { cat "$T/comp.out" "$T/comp.err"; fail "completion did not load"; }
grep -qx "complete -F _eshard_mpi eshard-mpi" "$T/comp.err" || fail "complete -p: $(cat "$T/comp.err")"
[ "$(cat "$T/comp.out")" = "status " ] || fail "completing 'st': $(cat "$T/comp.out")"
[ "$(comp eshard-mpi '' 2>/dev/null)" = "$(printf '%s\n' $commands --help --version | sort | tr '\n' ' ')" ] ||
  fail "completing a command: $(comp eshard-mpi '' 2>/dev/null)"
for c in $commands; do
  want=$("$R/bin/eshard-mpi" "$c" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p' | sort | tr '\n' ' ')
  got=$(comp eshard-mpi "$c" --job-dir "$T" -- 2>/dev/null)
  [ "$got" = "$want" ] || fail "completing the options of $c: got '$got', want '$want'"
done
mkdir -p "$T/cdir/jobs-a" && touch "$T/cdir/recipe-a.yaml"
[ "$(comp eshard-mpi status --job-dir "$T/cdir/" 2>/dev/null)" = "$T/cdir/jobs-a " ] || fail "--job-dir completes folders"
[ "$(comp eshard-mpi run --config "$T/cdir/r" 2>/dev/null)" = "$T/cdir/recipe-a.yaml " ] || fail "--config completes files"
[ "$(comp eshard-mpi run --num-shards "" 2>/dev/null)" = " " ] || fail "--num-shards completes nothing"
[ "$(comp eshard-mpi run --ray-mode "" 2>/dev/null)" = "per-attempt per-rank " ] || fail "--ray-mode completes its modes: $(comp eshard-mpi run --ray-mode "" 2>/dev/null)"
[ "$(comp eshard-mpi worker --ray-mode per-a 2>/dev/null)" = "per-attempt " ] || fail "--ray-mode per-a completes per-attempt"
pass "bash completion: loaded by bash-completion, every command and option of every command, --ray-mode's modes"

# After a launcher: bash-completion loads the launcher's completion by its name (the same file,
# installed as mpirun and mpiexec), which completes from the eshard-mpi word on; srun's (Slurm's)
# is wrapped once the file is loaded, and still answers for srun's own words.
lcomp() { # LAUNCHER WORDS...: as comp, through the completion registered for LAUNCHER
  PATH="$R/bin:/usr/bin:/bin" XDG_DATA_DIRS="$R/share" bash --norc --noprofile -c '
    . '"$BASH_COMPLETION"'
    l=$1; shift
    if [ "$l" = srun ]; then __load_completion eshard-mpi; fi
    complete -p "$l" >/dev/null 2>&1 || __load_completion "$l" || { echo "no completion loaded for $l"; exit 1; }
    spec=$(complete -p "$l"); fn=${spec#* -F }; fn=${fn%% *}
    echo "$spec${_eshard_mpi_launcher_prev[$l]:+ (before: ${_eshard_mpi_launcher_prev[$l]})}" >&2
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
    "$fn" "$l" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' lcomp "$@"
}
got=$(lcomp mpirun mpirun -np 2 eshard-mpi run --ray-mode "" 2>"$T/comp.err") || { cat "$T/comp.err"; fail "no completion for mpirun"; }
grep -qx "complete -F _eshard_mpi_launcher mpirun" "$T/comp.err" || fail "complete -p mpirun: $(cat "$T/comp.err")"
[ "$got" = "per-attempt per-rank " ] || fail "mpirun -np 2 eshard-mpi run --ray-mode <TAB>: '$got'"
[ "$(lcomp mpiexec mpiexec -n 2 -ppn 1 "$R/bin/eshard-mpi" st 2>/dev/null)" = "status " ] ||
  fail "mpiexec -n 2 -ppn 1 <path>/eshard-mpi st<TAB>: $(lcomp mpiexec mpiexec -n 2 -ppn 1 "$R/bin/eshard-mpi" st 2>&1)"
[ "$(lcomp mpirun mpirun --host a,b eshard-mpi status --job-dir "$T/cdir/" 2>/dev/null)" = "$T/cdir/jobs-a " ] ||
  fail "mpirun ... eshard-mpi status --job-dir completes folders"
[ "$(lcomp mpirun mpirun -np 2 eshard-mpi worker --job-d 2>/dev/null)" = "--job-dir " ] || fail "mpirun ... eshard-mpi worker --job-d<TAB>"
got=$(lcomp srun srun --nodes=2 eshard-mpi worker --job-d 2>"$T/comp.err")
grep -qx "complete -F _eshard_mpi_launcher srun (before: _srun)" "$T/comp.err" || fail "complete -p srun: $(cat "$T/comp.err")"
[ "$got" = "--job-dir " ] || fail "srun --nodes=2 eshard-mpi worker --job-d<TAB>: '$got'"
pass "completion after mpirun, mpiexec and srun (Slurm's srun completion kept for srun's own words)"

# ---- exit codes the other tests leave out: a job with a failed shard
cat >"$T/fail.sh" <<'EOF'
#!/bin/sh
exit 3
EOF
chmod +x "$T/fail.sh"
J=$T/job-fail
run_expect 0 "$R/bin/eshard-mpi" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" \
  --num-shards 2 --max-retries 0 --process-cmd "$T/fail.sh {input} {output}"
run_expect 2 "$R/bin/eshard-mpi" worker --job-dir "$J"
run_expect 2 "$R/bin/eshard-mpi" status --job-dir "$J"
expect_out "failed=2"
run_expect 2 "$R/bin/eshard-mpi" verify --job-dir "$J"
expect_err "ERROR: Verification stopped: not all shards are complete."
run_expect 2 "$R/bin/eshard-mpi" merge --job-dir "$J" --output "$T/fail-merged.jsonl"
[ ! -e "$T/fail-merged.jsonl" ] || fail "merge of a failed job wrote an output"
run_expect 0 "$R/bin/eshard-mpi" retry --job-dir "$J" --all-failed
run_expect 1 "$R/bin/eshard-mpi" status --job-dir "$J"
run_expect 1 "$R/bin/eshard-mpi" verify --job-dir "$J"
pass "exit codes: worker, status, verify and merge 2 with failed shards; status and verify 1 after retry"
echo "PASS test_install"
