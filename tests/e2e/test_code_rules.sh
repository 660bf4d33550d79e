#!/bin/bash
# The code's own rules (DESIGN.md), checked on every run so that they hold after every change:
#   - exactly one file of the library starts processes (src/proc.c);
#   - MPI only in mpi/; no cJSON or libyaml type in the public headers;
#   - only fs.c and claim.c touch shared files with rename/link/O_EXCL/flock;
#   - no sprintf, strcpy, strcat, strtok, atoi;
#   - modules stay small: recipe.c under 900 lines, jsonl.c under 1,500, and no function over
#     120 lines but the three hot parser functions;
#   - a build without ESHARD_TEST_HOOKS carries no crash point (not even its name).
. "$(dirname "$0")/lib.sh"
cd "$SRC"

spawners=$(grep -lE '\b(posix_spawnp?|fork|vfork|system|popen|execvp?e?)\s*\(' src/*.c | sort | tr '\n' ' ')
[ "$spawners" = "src/proc.c " ] || fail "processes are started outside src/proc.c: $spawners"
pass "only src/proc.c starts processes"

! grep -lE '#include\s*[<"]mpi\.h' src/*.c src/*.h include/eshard/*.h | grep . || fail "mpi.h outside mpi/"
! grep -lE '#include\s*[<"](cjson/cJSON|cJSON|yaml)\.h' include/eshard/*.h | grep . || fail "cJSON or yaml.h in a public header"
! grep -nE '\bcJSON\b|yaml_' include/eshard/*.h | grep -v '^include/eshard/jsonl.h:.*No cJSON here' | grep . ||
  fail "a cJSON or libyaml type in a public header"
pass "MPI only in mpi/; no cJSON or libyaml in include/eshard"

shared=$(grep -lE '\b(rename|link|linkat|renameat2?|flock)\s*\(|O_EXCL' src/*.c | sort | tr '\n' ' ')
[ "$shared" = "src/claim.c src/fs.c " ] || fail "shared-file primitives outside fs.c and claim.c: $shared"
pass "rename, link, O_EXCL and flock only in fs.c and claim.c"

! grep -nE '\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets)\s*\(' src/*.c mpi/*.c | grep . ||
  fail "a banned function (sprintf, strcpy, strcat, strtok, atoi) is used"
pass "no sprintf, strcpy, strcat, strtok or atoi"

[ "$(wc -l <src/recipe.c)" -lt 900 ] || fail "src/recipe.c has $(wc -l <src/recipe.c) lines (limit 900)"
[ "$(wc -l <src/jsonl.c)" -lt 1500 ] || fail "src/jsonl.c has $(wc -l <src/jsonl.c) lines (limit 1,500)"
python3 - src/*.c mpi/*.c <<'PY' || fail "functions over 120 lines (see above)"
import re, sys
allowed = {"parse_line", "scan_string", "shortest_fast"}
bad = []
for path in sys.argv[1:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("{"):
            j = i - 1
            while j >= 0 and not re.match(r"^[A-Za-z_].*\(", lines[j]):
                j -= 1
            names = re.findall(r"([A-Za-z_]\w*)\s*\(", lines[j]) if j >= 0 else []
            names = [n for n in names if n != "__attribute__" and n != "always_inline"]
            name = names[0] if names else "?"
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            if k - j + 1 > 120 and name not in allowed:
                bad.append(f"{path}: {name} has {k - j + 1} lines")
            i = k
        i += 1
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
pass "recipe.c $(wc -l <src/recipe.c) lines, jsonl.c $(wc -l <src/jsonl.c) lines, no function over 120 lines but the hot parser"

# The library files that hold crash points, compiled as a release build compiles them.
O=$T/release
mkdir -p "$O"
for f in util prepare claim worker merge retry; do
  cc -std=c11 -D_GNU_SOURCE -O1 -Iinclude -Isrc $(pkg-config --cflags libcjson yaml-0.1) -c "src/$f.c" -o "$O/$f.o" ||
    fail "cannot compile src/$f.c"
done
if grep -l -a -E 'ESHARD_TEST_CRASH_AT|ESHARD_TEST_HOOK|crash point' "$O"/*.o; then
  fail "a build without ESHARD_TEST_HOOKS carries crash points"
fi
names=$(grep -ohE 'es_crash_point\("[^"]+"\)' src/*.c | sed 's/.*("\(.*\)")/\1/' | sort -u)
[ -n "$names" ] || fail "no crash point found in src/"
for n in $names; do
  ! grep -q -a -F "$n" "$O"/*.o || fail "crash point name '$n' is in a release object"
done
pass "a release build carries no crash point ($(echo "$names" | wc -l) names checked)"
