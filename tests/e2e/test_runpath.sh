#!/bin/bash
# The binary's RUNPATH holds no empty element and no relative folder (CMakeLists.txt,
# ESHARD_RUNPATH): the loader would look there, the current folder for an empty one, for every
# library of every process the binary starts (each shard's supervisor too), so that a library
# planted in the folder a job was started from would be loaded, and a start from a folder on
# the shared file system cost dozens of failed lookups. CMake's own build-tree RUNPATH ended in
# an empty element. Checked in the dynamic section and with the loader itself (LD_DEBUG=libs:
# every file it tries has an absolute path).
. "$(dirname "$0")/lib.sh"
command -v readelf >/dev/null || fail "readelf is not installed (binutils, which gcc brings: scripts/install-deps.sh)"

path=$(readelf -d "$BIN" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]$/\2/p')
echo "  RUNPATH of $BIN: '$path'"
if [ -n "$path" ]; then
  case $path in :* | *: | *::*) fail "the RUNPATH '$path' has an empty element (the current folder)" ;; esac
  IFS=: read -r -a parts <<<"$path"
  for p in "${parts[@]}"; do
    case $p in /*) ;; *) fail "the RUNPATH '$path' has a relative element '$p'" ;; esac
  done
fi
pass "the RUNPATH has only absolute folders"

mkdir -p "$T/cwd"
(cd "$T/cwd" && LD_DEBUG=libs "$BIN" --version) >"$T/out" 2>"$T/ld" || { tail -5 "$T/ld"; fail "$BIN --version failed"; }
grep -q "trying file=/" "$T/ld" || fail "LD_DEBUG=libs showed no library search (is this a static binary?)"
if grep "trying file=" "$T/ld" | grep -v "trying file=/" >"$T/rel"; then
  head -3 "$T/rel"
  fail "the loader looked for a library relative to the current folder"
fi
pass "the loader looks for no library in the current folder"
