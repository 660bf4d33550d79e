# shellcheck shell=bash
# Inputs and checks shared by the tests of the parallel prepare (test_prepare_threads: threads;
# test_run_prepare_ranks: the ranks of run). Source it after lib.sh.

# ranges_input DIR: a dataset folder whose files cut into byte ranges at every awkward place:
# nested folders, CRLF lines, a 2000-byte line, non-ASCII text, media paths, an empty file and a
# last line without '\n'.
ranges_input() {
  mkdir -p "$1/nested/deeper" "$1/media"
  python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
def rows(path, lo, hi, crlf=False, extra=None):
    with open(path, "w", newline="") as f:
        for i in range(lo, hi):
            r = {"id": i, "text": "word " * (i % 13), "n": i * 0.5}
            if i % 5 == 0:
                r["images"] = ["media/%d.jpg" % i]
            if extra and i in extra:
                r["text"] = extra[i]
            f.write(json.dumps(r, ensure_ascii=False) + ("\r\n" if crlf else "\n"))
rows(os.path.join(d, "a.jsonl"), 0, 120, extra={7: "x" * 2000, 50: "\u4e2d\u6587 \u00e9"})
rows(os.path.join(d, "nested/b.jsonl"), 120, 130, crlf=True)
open(os.path.join(d, "nested/c.jsonl"), "w").close()
rows(os.path.join(d, "nested/deeper/d.jsonl"), 130, 300)
# The last line without '\n'.
with open(os.path.join(d, "nested/deeper/d.jsonl"), "a") as f:
    f.write('{"id": 300, "text": "last"}')
PY
}

# same_job A B: the two job folders are the same but for the manifest's created_at.
same_job() {
  python3 - "$1/manifest.json" "$2/manifest.json" <<'PY' || fail "manifests of $1 and $2 differ"
import re, sys
a, b = (re.sub(rb'"created_at": "[^"]*"', b"", open(p, "rb").read()) for p in sys.argv[1:])
sys.exit(a != b)
PY
  cmp "$1/recipe.yaml" "$2/recipe.yaml" || fail "recipe.yaml of $1 and $2 differ"
  diff -r "$1/shards" "$2/shards" >/dev/null || fail "shards of $1 and $2 differ"
}
