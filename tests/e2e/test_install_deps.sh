#!/bin/bash
# scripts/install-deps.sh's options and package sets, without installing anything:
#   - --help prints the usage (exit 0); an unknown argument, or --runtime with --test, is a
#     usage error (exit 2, the usage on stderr, nothing on stdout);
#   - --list prints the set: --runtime holds the compiler, CMake, Open MPI and the libraries
#     CMakeLists.txt looks for (each .pc file and mpicc belongs to one of its packages) and none
#     of the test tools; --test (the default, which scripts/test.sh uses) holds all of
#     --runtime and the test tools;
#   - on this machine, which has them all, the default and --runtime run no apt-get;
#   - the README gives the size of each set, as --help does.
. "$(dirname "$0")/lib.sh"
DEPS=$SRC/scripts/install-deps.sh

run_expect 0 bash "$DEPS" --help
for w in --runtime --test --list; do expect_out "$w"; done
run_expect 2 bash "$DEPS" --bogus
expect_err "unknown argument '--bogus'"
expect_err "usage: scripts/install-deps.sh"
[ ! -s "$T/out" ] || fail "a usage error printed on stdout"
run_expect 2 bash "$DEPS" --runtime --test --list
expect_err "not both"
pass "--help, unknown arguments and --runtime with --test"

run_expect 0 bash "$DEPS" --runtime --list
sort "$T/out" >"$T/runtime"
run_expect 0 bash "$DEPS" --test --list
sort "$T/out" >"$T/test"
run_expect 0 bash "$DEPS" --list
sort "$T/out" >"$T/default"
cmp -s "$T/test" "$T/default" || fail "the default set is not --test's"
[ -z "$(comm -23 "$T/runtime" "$T/test")" ] || fail "--test lacks packages of --runtime: $(comm -23 "$T/runtime" "$T/test")"
for p in gcc make cmake pkg-config openmpi-bin libopenmpi-dev libcjson-dev libyaml-dev libssl-dev zlib1g-dev libzstd-dev; do
  grep -qx "$p" "$T/runtime" || fail "--runtime lacks $p"
done
for p in mpich slurm-wlm python3-fusepy clang chromium bash-completion man-db; do
  ! grep -qx "$p" "$T/runtime" || fail "--runtime holds the test tool $p"
  grep -qx "$p" "$T/test" || fail "--test lacks $p"
done
# What CMake looks for comes from --runtime's packages.
for m in libcjson yaml-0.1 zlib libzstd libcrypto; do
  pc=$(pkg-config --path "$m") || fail "pkg-config does not find $m"
  owner=$(dpkg -S "$(readlink -f "$pc")" | sed -n '1s/:.*//p')
  grep -qx "$owner" "$T/runtime" || fail "$m ($pc) comes from $owner, which --runtime lacks"
done
owner=$(dpkg -S "$(readlink -f "$(command -v mpicc)")" | sed -n '1s/:.*//p')
grep -qx "$owner" "$T/runtime" || fail "mpicc comes from $owner, which --runtime lacks"
pass "--runtime: compiler, CMake, Open MPI and the libraries; --test: all of it and the test tools"

# No apt-get on a machine that has everything: a failing apt-get first on PATH must not run.
mkdir "$T/bin"
printf '#!/bin/sh\necho "apt-get ran: $*" >&2\nexit 97\n' >"$T/bin/apt-get"
chmod +x "$T/bin/apt-get"
cp "$T/bin/apt-get" "$T/bin/sudo"
for set in "" --runtime --test; do
  run_expect 0 env PATH="$T/bin:$PATH" bash "$DEPS" $set
  [ ! -s "$T/err" ] || { cat "$T/err"; fail "install-deps $set wanted to install on a complete machine"; }
done
pass "nothing is installed when nothing is missing"

# The README gives each set's size, the same as --help.
run_expect 0 bash "$DEPS" --help
for set in runtime test; do
  size=$(sed -n "/^  --$set /,/^  --[a-z]/p" "$T/out" | tr -s ' \n' ' ' | grep -o 'about [0-9]* packages, [0-9.]* [MG]iB')
  [ -n "$size" ] || fail "--help gives no size for --$set"
  tr -s ' \n' ' ' <"$SRC/README.md" | grep -qF -- "$size" || fail "README.md lacks the size of --$set: $size"
done
pass "README.md gives the size of --runtime and --test"
echo "PASS test_install_deps"
