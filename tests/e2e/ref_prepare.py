#!/usr/bin/env python3
"""Test oracle: what the reference prepare (docs/job-folder.md#normalized-lines,
docs/design.md#the-split-rule) writes for an input, computed with Python's own json module.
Usage: ref_prepare.py DATASET NUM_SHARDS OUT_DIR [--media K]... [--index K]...
Writes OUT_DIR/shards/<id>.jsonl and OUT_DIR/facts.json (rows, sizes, hashes, input files)."""
import hashlib, json, os, sys

def suffix_ok(name):
    i = name.rfind(".")
    return 0 < i < len(name) - 1 and name[i:].lower() == ".jsonl"

def discover(root):
    if os.path.isfile(root):
        return [(root, os.path.basename(root))]
    out = []
    # os.walk does not enter symlinked folders; a symlink to a file is in filenames.
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            if suffix_ok(f) and os.path.isfile(p):
                out.append((p, os.path.relpath(p, root)))
    out.sort(key=lambda t: t[1])
    return out

def main():
    args = sys.argv[1:]
    ds, n, out = os.path.realpath(args[0]), int(args[1]), args[2]
    media = [args[i + 1] for i, a in enumerate(args) if a == "--media"] or ["images", "audios", "videos"]
    index = sorted({args[i + 1] for i, a in enumerate(args) if a == "--index"})
    root = ds if os.path.isdir(ds) else os.path.dirname(ds)
    lines, files = [], []
    g = 0
    for p, rel in discover(ds):
        raw = open(p, "rb").read()
        rows = 0
        for line in raw.split(b"\n"):
            if line == b"" :
                continue
            rec = json.loads(line.decode("utf-8"))
            for k in media:
                v = rec.get(k)
                if isinstance(v, list):
                    rec[k] = [x if (not x or x.startswith(("http://", "https://", "s3://", "gs://", "hdfs://")) or x.startswith("/")) else os.path.realpath(os.path.join(root, x)) for x in v]
            for k in index:
                if k not in rec:
                    rec[k] = g
            lines.append((json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
            g += 1
            rows += 1
        files.append({"path": p, "relative_path": rel, "rows": rows, "sha256": hashlib.sha256(raw).hexdigest(), "size_bytes": len(raw)})
    T, R = sum(map(len, lines)), len(lines)
    width = max(5, len(str(n)))
    shards, cur, k, w, r = [], [], 0, 0, 0
    for ln in lines:
        cur.append(ln); w += len(ln); r += 1
        if k < n - 1 and (w * n >= T * (k + 1) or R - r == n - k - 1):
            shards.append(cur); cur = []; k += 1
    shards.append(cur)
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    facts = {"total_rows": R, "total_size_bytes": T, "input_files": files, "media_root": root, "dataset_path": ds,
             "normalized_sha256": hashlib.sha256(b"".join(lines)).hexdigest(), "shards": []}
    for i, s in enumerate(shards):
        sid = "part-%0*d-of-%0*d" % (width, i, width, n)
        data = b"".join(s)
        open(os.path.join(out, "shards", sid + ".jsonl"), "wb").write(data)
        facts["shards"].append({"id": sid, "index": i, "path": "shards/%s.jsonl" % sid, "rows": len(s),
                                "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)})
    json.dump(facts, open(os.path.join(out, "facts.json"), "w"), indent=2, sort_keys=True)

main()
