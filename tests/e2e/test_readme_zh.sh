#!/bin/bash
# README.md and README_ZH.md stay in step (the Chinese one is a translation of the whole README):
#   - each links to the other in its first lines;
#   - both name the same `--option` tokens and the same `eshard-mpi <command>` uses (compared as
#     sets; the differences are printed), and both name every command and every option of the
#     binary's --help;
#   - both have the same Commands table rows with the same exit codes;
#   - both name the same CMake options (-D...), the same paths of the repository (scripts/...,
#     tests/..., src/..., ...) and the same Source layout table rows (the modules of each row);
#   - no prose line of README_ZH.md is over 180 columns (a CJK character counts two): a
#     paragraph left on one line;
#   - their fenced code blocks are identical, in the same order (commands stay commands), and
#     their headings have the same levels in the same order (the same sections);
#   - every in-page link (#anchor) of each file leads to one of its headings.
. "$(dirname "$0")/lib.sh"
EN=$SRC/README.md
ZH=$SRC/README_ZH.md
[ -f "$ZH" ] || fail "no README_ZH.md"

commands=$("$BIN" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[ -n "$commands" ] || fail "no command list in eshard-mpi --help"
: >"$T/help-options"
for c in $commands; do
  "$BIN" "$c" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p' >>"$T/help-options"
done

python3 - "$EN" "$ZH" "$T/help-options" $commands <<'PY' || fail "README.md and README_ZH.md differ (see above)"
import re, sys, unicodedata

en_path, zh_path, help_path = sys.argv[1:4]
commands = sys.argv[4:]
help_options = set(open(help_path, encoding="utf-8").read().split())
texts = {"README.md": open(en_path, encoding="utf-8").read(),
         "README_ZH.md": open(zh_path, encoding="utf-8").read()}
problems = []

def report(what, a, b):
    """Compare two sets; name what each file has that the other lacks."""
    if a == b:
        return
    problems.append("%s differ:\n  only in README.md:    %s\n  only in README_ZH.md: %s"
                    % (what, " ".join(sorted(a - b)) or "-", " ".join(sorted(b - a)) or "-"))

# Links to each other near the top.
for name, other in (("README.md", "README_ZH.md"), ("README_ZH.md", "README.md")):
    head = "\n".join(texts[name].split("\n")[:5])
    if "](%s)" % other not in head:
        problems.append("%s does not link to %s in its first 5 lines" % (name, other))

# Options and command uses, as sets.
def options(t):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", t))

def command_uses(t):
    return {"eshard-mpi " + w for w in re.findall(r"\beshard-mpi ([a-z]+)\b", t) if w in commands}

en_opts, zh_opts = options(texts["README.md"]), options(texts["README_ZH.md"])
report("--option tokens", en_opts, zh_opts)
report("'eshard-mpi <command>' uses", command_uses(texts["README.md"]), command_uses(texts["README_ZH.md"]))
for name, opts in (("README.md", en_opts), ("README_ZH.md", zh_opts)):
    missing = help_options - opts
    if missing:
        problems.append("%s lacks options of --help: %s" % (name, " ".join(sorted(missing))))

# The Commands table: one row per command, the same exit codes (numbers and 128+signal).
def codes(cell):
    found = set(re.findall(r"(?<![\w+-])(\d+)(?![\w+])", cell.replace("128+signal", "")))
    if "128+signal" in cell:
        found.add("128+signal")
    return " ".join(sorted(found))

tables = {}
for name, t in texts.items():
    rows = {}
    for line in t.split("\n"):
        m = re.match(r"^\| `([a-z]+)` \|(.*)\|\s*$", line)
        if m and m.group(1) in commands:
            rows[m.group(1)] = codes(m.group(2).split("|")[-1])
    tables[name] = rows
    missing = set(commands) - set(rows)
    if missing:
        problems.append("%s's Commands table lacks rows for: %s" % (name, " ".join(sorted(missing))))
for c in commands:
    a, b = tables["README.md"].get(c), tables["README_ZH.md"].get(c)
    if a is not None and b is not None and a != b:
        problems.append("exit codes of %s: README.md says '%s', README_ZH.md says '%s'" % (c, a, b))

# CMake options and the repository's paths, as sets: an option or a file that one README
# explains and the other does not.
def cmake_options(t):
    return set(re.findall(r"(?<![\w-])-D[A-Z][A-Z0-9_]*(?:=[A-Za-z0-9_.]+)?", t))

def repo_paths(t):
    return set(re.findall(r"(?<![\w/.-])(?:\.ci|scripts|tests|src|include|mpi|configs|docs|cmake)/"
                          r"[A-Za-z0-9_./*<>-]*[A-Za-z0-9_*>/]", t))

report("CMake options (-D...)", cmake_options(texts["README.md"]), cmake_options(texts["README_ZH.md"]))
report("repository paths", repo_paths(texts["README.md"]), repo_paths(texts["README_ZH.md"]))

# The Source layout table: the modules of each row (the code spans of its first cell), in order.
def module_rows(t):
    start = t.find("\n| `buf`")
    rows = []
    for line in t[start + 1:].split("\n") if start >= 0 else []:
        if not line.startswith("|"):
            break
        rows.append(" ".join(re.findall(r"`([^`]+)`", line.split("|")[1])))
    return rows

en_rows, zh_rows = module_rows(texts["README.md"]), module_rows(texts["README_ZH.md"])
if not en_rows or en_rows != zh_rows:
    problems.append("the Source layout tables differ:\n--- README.md\n%s\n--- README_ZH.md\n%s"
                    % ("\n".join(en_rows), "\n".join(zh_rows)))

# README_ZH.md wrapped like README.md: no prose line (outside code blocks and tables) left as a
# whole paragraph.
def width(line):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)

body = re.sub(r"^```.*?^```", "", texts["README_ZH.md"], flags=re.M | re.S)
for line in body.split("\n"):
    if not line.startswith("|") and width(line) > 180:
        problems.append("README_ZH.md has a prose line of %d columns (wrap it): %s..." % (width(line), line[:40]))

# Fenced code blocks: the same, in the same order.
def blocks(t):
    return re.findall(r"^```[^\n]*\n(.*?)^```", t, flags=re.M | re.S)

en_blocks, zh_blocks = blocks(texts["README.md"]), blocks(texts["README_ZH.md"])
if len(en_blocks) != len(zh_blocks):
    problems.append("README.md has %d code blocks, README_ZH.md %d" % (len(en_blocks), len(zh_blocks)))
for i, (a, b) in enumerate(zip(en_blocks, zh_blocks)):
    if a != b:
        problems.append("code block %d differs:\n--- README.md\n%s--- README_ZH.md\n%s" % (i + 1, a, b))
        break

# The same sections: the headings' levels in the same order (a section added to one only shows).
def headings(t):
    body = re.sub(r"^```.*?^```", "", t, flags=re.M | re.S)
    return re.findall(r"^(#{1,6}) +(.+?) *$", body, flags=re.M)

en_h, zh_h = headings(texts["README.md"]), headings(texts["README_ZH.md"])
if [len(l) for l, _ in en_h] != [len(l) for l, _ in zh_h]:
    problems.append("the sections differ:\n--- README.md\n%s\n--- README_ZH.md\n%s"
                    % ("\n".join(l + " " + h for l, h in en_h), "\n".join(l + " " + h for l, h in zh_h)))

# In-page links lead to a heading (GitHub's anchors: lower case, punctuation dropped, spaces
# to hyphens, -1, -2 ... for repeated headings).
for name, t in texts.items():
    body = re.sub(r"^```.*?^```", "", t, flags=re.M | re.S)
    anchors = set()
    for h in re.findall(r"^#{1,6} +(.+?) *$", body, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        n, s = 0, slug
        while s in anchors:
            n += 1
            s = "%s-%d" % (slug, n)
        anchors.add(s)
    for link in re.findall(r"\]\(#([^)]+)\)", body):
        if link not in anchors:
            problems.append("%s links to #%s, which is no heading of it" % (name, link))

if problems:
    print("\n".join(problems))
    sys.exit(1)
print("ok: %d options, %d command uses, %d commands in both tables, %d identical code blocks, %d sections"
      % (len(en_opts), len(command_uses(texts["README.md"])), len(commands), len(en_blocks), len(en_h)))
PY
pass "README.md and README_ZH.md name the same commands, options and exit codes"
echo "PASS test_readme_zh"
