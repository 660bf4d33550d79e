#!/bin/bash
# The code's own rules (docs/design.md), checked on every run so that they hold after every change:
#   - exactly one file of the library starts processes (src/proc.c);
#   - MPI only in mpi/; no cJSON or libyaml type in the public headers;
#   - only fs.c and the files of claim touch shared files with rename/link/O_EXCL/flock;
#   - no path in a fixed char array in src/ or mpi/ (struct es_buf; jobpath.h in the job folder);
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

shared=$(grep -lE '\b(rename|link|linkat|renameat2?|flock)\s*\(|O_EXCL' src/*.c |
  { grep -vxE 'src/(fs|claim|claim_[a-z]+)\.c' || true; } | tr '\n' ' ')
[ -z "$shared" ] || fail "shared-file primitives outside fs.c and claim*.c: $shared"
pass "rename, link, O_EXCL and flock only in fs.c and claim*.c"

# A path is built in a struct es_buf, which grows, never in a fixed array that cuts it short or
# needs a length check at every site (issue 33; the job folder's paths come from jobpath.h).
# Only message buffers, by their names (msg, last_msg, line, what: log.c, prepare.c, attempt.c,
# supervise.c), may be char arrays of 4096 or PATH_MAX bytes.
check "no fixed path array (char x[4096] or x[PATH_MAX]) in src/ or mpi/" python3 - <<'PY'
import glob, re, sys
bad = []
for f in sorted(glob.glob("src/*.[ch]") + glob.glob("mpi/*.[ch]")):
    for n, line in enumerate(open(f, encoding="utf-8"), 1):
        if not re.search(r"\bchar\b", line.split("//")[0]):
            continue
        for name in re.findall(r"(\w+)\s*\[\s*(?:4096|PATH_MAX)\s*\]", line):
            if name not in ("msg", "last_msg", "line", "what"):
                bad.append(f"{f}:{n}: char {name}[...]: build a path in a struct es_buf (jobpath.h in a job folder)")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# The job folder's layout is typed out once, in jobpath (docs/job-folder.md, "Layout").
! grep -nE '"[^"]*(state/(locks|done|failed|stale_locks|backups|events|history)|attempts/%)' src/*.c |
  grep -v '^src/jobpath\.c:' | grep . || fail "a job-folder path typed out outside src/jobpath.c (use jobpath.h)"
pass "the job folder's paths are built only by jobpath"

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
for f in crash prepare claim claim_fence claim_takeover claim_backup worker merge retry; do
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

# Every document a comment or document cites is in the repository, and so is the heading it
# names (docs/design.md, "Citing documents"): docs/x.md#anchor, docs/x.md "Heading" or
# README "Heading", and any other name ending in .md. A clone has nothing else to follow.
check "every cited document and heading exists in the repository" python3 - <<'PY'
import os, re, sys

def slug(h):
    h = re.sub(r"[^\w\- ]", "", h.strip().lower())
    return h.replace(" ", "-")

def titles(path):
    """The headings of a markdown file (outside code blocks) and the README's bold paragraph
    titles ("**Resubmitting a job.**"), as written and as anchors."""
    heads, fenced = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                heads.append(m.group(1).replace("`", ""))
            m = re.match(r"\*\*([^*]+?)\.?\*\*", line)
            if m:
                heads.append(m.group(1))
    return heads, {slug(h) for h in heads}

docs = {}
def doc(rel):
    if rel not in docs:
        docs[rel] = titles(rel) if os.path.isfile(rel) else None
    return docs[rel]

def canon(name, here):
    """The repository path a cited name means, relative to the file that cites it or the root."""
    name = {"README": "README.md", "README_ZH": "README_ZH.md"}.get(name, name)
    for cand in (os.path.normpath(os.path.join(os.path.dirname(here), name)), os.path.normpath(name)):
        if os.path.isfile(cand):
            return cand
    return None

roots = ["src", "include", "mpi", "scripts", "tests", "docs", "cmake", "configs"]
files = ["README.md", "README_ZH.md", "CMakeLists.txt"]
for r in roots:
    for d, sub, names in os.walk(r):
        sub[:] = [s for s in sub if s not in ("data", "corpus", "__pycache__")]
        files += [os.path.join(d, n) for n in names if re.search(r"\.(c|h|sh|py|md|txt|cmake|sbatch|yaml)$|^[^.]+$", n)]
NAME = r"(docs/[\w.-]+\.md|README(?:_ZH)?(?:\.md)?|[\w-]+\.md)"
bad = []
for f in sorted(files):
    if f == "tests/e2e/test_code_rules.sh":
        continue
    try:
        text = open(f, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue
    for n, line in enumerate(text.split("\n"), 1):
        where = f"{f}:{n}"
        if "\u00a7" in line:
            bad.append(f"{where}: a section sign: cite a heading of the repository's documents")
        for m in re.finditer(r"(?<![\w/.$-])([\w./-]*[\w-]\.md)\b", line):
            if "://" in line[max(0, m.start() - 60):m.start()] or m.group(1).startswith("$"):
                continue
            # An installed copy of a document (share/doc/eshard-mpi/README.md) is one too.
            name = re.sub(r"^share/doc/eshard-mpi/", "", m.group(1))
            if canon(name, f) is None:
                bad.append(f"{where}: {m.group(1)} is not a file of the repository")
        for m in re.finditer(NAME + r"#([\w-]+)", line):
            p = canon(m.group(1), f)
            if p and p.endswith(".md") and m.group(2) not in doc(p)[1]:
                bad.append(f"{where}: {p} has no heading for #{m.group(2)}")
        for m in re.finditer(r"(?<![\w/\"$.-])" + NAME + r",?\s+\"([^\"]+)\"", line):
            p = canon(m.group(1), f)
            if p and p.endswith(".md") and not any(h.startswith(m.group(2)) for h in doc(p)[0]):
                bad.append(f"{where}: {p} has no heading \"{m.group(2)}\"")
        if f.endswith(".md"):
            for m in re.finditer(r"\]\(([^)#\s]*)(?:#([\w-]+))?\)", line):
                target, anchor = m.group(1), m.group(2)
                if re.match(r"[a-z]+:", target):
                    continue
                p = os.path.normpath(os.path.join(os.path.dirname(f), target)) if target else f
                if not os.path.exists(p):
                    bad.append(f"{where}: link to {target}, which is not in the repository")
                elif anchor and p.endswith(".md") and anchor not in doc(p)[1]:
                    bad.append(f"{where}: {p} has no heading for #{anchor}")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# The layer map of docs/design.md ("Layers"), read from its table: a module includes only the
# headers of its own layer and the layers above it, only mpi/ includes mpi.h, a public header
# only public headers, a private header of src/ is included only from src/, and no two library
# modules include each other, directly or through others, but the known cycles below.
check "every #include follows the layer map of docs/design.md; no include cycle but the known ones" python3 - <<'PY'
import os, re, sys

# Known cycles (docs/design.md, "Include cycles"): none. An entry here would be a cycle
# allowed for now; once it is gone, the test fails until the entry goes, so that the cycle
# cannot come back unnoticed.
KNOWN_CYCLES = []

layer, part_of, in_table = {}, {"yamltree": "yaml"}, False
for line in open("docs/design.md", encoding="utf-8"):
    if line.startswith("## "):
        in_table = line.strip() == "## Layers"
    m = re.match(r"\|\s*(\d+)\s*\|[^|]*\|([^|]*)\|", line) if in_table else None
    if m:
        # `recipe` (`yaml`, `pyval`): a module and the private parts that belong to it.
        for mod, parts in re.findall(r"`(\w+)`(?:\s*\(([^)]*)\))?", m.group(2)):
            layer[mod] = int(m.group(1))
            for part in re.findall(r"`(\w+)`", parts):
                part_of[part] = mod
if "mpi" not in layer or len(layer) < 10:
    sys.exit("docs/design.md has no layer table under '## Layers'")

def module(path):
    d, name = os.path.split(path)
    if d == "mpi":
        return "mpi"
    base = name.rsplit(".", 1)[0]
    base = part_of.get(base, base)
    return part_of.get(base, base)

files = sorted(f"{d}/{n}" for d in ("src", "include/eshard", "mpi") for n in os.listdir(d)
               if n.endswith((".c", ".h")))
private = {n for n in os.listdir("src") if n.endswith(".h")}
bad, edges = [], {}
for f in files:
    src = module(f)
    if src not in layer:
        bad.append(f"{f}: module '{src}' is in no layer of docs/design.md")
        continue
    for n, line in enumerate(open(f, encoding="utf-8"), 1):
        m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
        if not m:
            continue
        inc, where = m.group(2), f"{f}:{n}"
        if inc == "mpi.h":
            if src != "mpi":
                bad.append(f"{where}: mpi.h outside mpi/")
            continue
        if inc.startswith("eshard/"):
            dst = module(inc)
        elif m.group(1) == '"' and f.startswith("src/") and inc in private:
            dst = module(inc)
        elif m.group(1) == '"' and inc in private:
            bad.append(f"{where}: the private header src/{inc} outside src/")
            continue
        else:
            continue  # a system header, or mpi/'s own
        if f.startswith("include/") and not inc.startswith("eshard/"):
            bad.append(f"{where}: a public header includes the private {inc}")
        if dst not in layer:
            bad.append(f"{where}: {inc} belongs to no layer of docs/design.md")
        elif layer[dst] > layer[src]:
            bad.append(f"{where}: {src} (layer {layer[src]}) includes {inc} of {dst} (layer {layer[dst]})")
        elif dst != src and src != "mpi":
            edges.setdefault(src, set()).add(dst)

# Strongly connected components (Tarjan): each one with more than one module is a cycle.
index, low, stack, on, sccs = {}, {}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = set()
        while True:
            w = stack.pop(); on.discard(w); comp.add(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)
for v in sorted(edges):
    if v not in index:
        visit(v)
for c in sccs:
    if c not in KNOWN_CYCLES:
        bad.append(f"an include cycle between modules: {', '.join(sorted(c))}")
for c in KNOWN_CYCLES:
    if c not in sccs:
        bad.append(f"the known cycle {', '.join(sorted(c))} is gone: drop it from KNOWN_CYCLES "
                   "and from docs/design.md, \"Include cycles\"")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
