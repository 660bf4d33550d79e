#!/usr/bin/env python3
"""The reference implementation's `status` and `merge`, as docs/job-folder.md#status-of-a-shard and
docs/job-folder.md#merge-record describe them, for checking that the reference still reads
eshard-mpi's job folders.

    ref_jobs.py status JOB            prints the status object; exit 0 complete, 2 failed, 1 else
    ref_jobs.py merge JOB OUTPUT      merges like `shard_job.py merge --overwrite`; exit 0 or 2

Only the reference's rules are used: a shard is done when state/done/<id>.json exists, failed
when state/failed/<id>.json exists, else running or stale by its lock's mtime against the
static lock timeout, else pending. Nothing of eshard-mpi's (fences, leases) is known here.
"""
import hashlib
import json
import os
import sys
import time
import uuid


def load_manifest(job):
    with open(os.path.join(job, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    if m.get("schema_version") != 2 or not m.get("shards"):
        raise ValueError("bad manifest")
    ex = m.get("execution")
    if not isinstance(ex, dict) or ex.get("executor_type") != "ray" or not ex.get("ray_address"):
        raise ValueError("bad execution")
    return m


def collect_status(job, lock_timeout=None):
    m = load_manifest(job)
    timeout = lock_timeout or int(m.get("policy", {}).get("lock_timeout_secs", 126000))
    counts = dict(done=0, failed=0, pending=0, running=0, stale=0)
    shards = []
    now = time.time()
    for s in m["shards"]:
        sid = s["id"]
        rec = {"shard_id": sid, "rows": s["rows"]}
        done = os.path.join(job, "state", "done", sid + ".json")
        failed = os.path.join(job, "state", "failed", sid + ".json")
        lock = os.path.join(job, "state", "locks", sid + ".lock")
        if os.path.exists(done):
            rec["status"] = "done"
            try:
                rec["owner"] = json.load(open(done)).get("hostname")
            except ValueError:
                rec["metadata_error"] = True
        elif os.path.exists(failed):
            rec["status"] = "failed"
            rec["error"] = json.load(open(failed)).get("last_error")
        elif os.path.exists(lock):
            try:
                age = max(0.0, now - os.stat(lock).st_mtime)
            except FileNotFoundError:
                age = 0.0
            rec["status"] = "stale" if age > timeout else "running"
            rec["lock_age_secs"] = age
        else:
            rec["status"] = "pending"
        counts[rec["status"]] += 1
        shards.append(rec)
    total = len(m["shards"])
    return {"complete": counts["done"] == total, "counts": counts, "execution": m["execution"],
            "job_dir": os.path.realpath(job), "job_id": os.path.basename(os.path.realpath(job)),
            "shards": shards, "terminal": counts["done"] + counts["failed"] == total, "total": total}


def strict_line(raw, path, lineno):
    text = raw.decode("utf-8")
    if not text.strip(" \t\n\r\v\f"):
        raise ValueError("Blank JSONL record at %s:%d" % (path, lineno))
    if not isinstance(json.loads(text), dict):
        raise ValueError("JSONL record must be an object at %s:%d" % (path, lineno))


def merge(job, output):
    st = collect_status(job)
    if not st["complete"]:
        c = st["counts"]
        raise ValueError("Cannot merge an incomplete job: pending=%d running=%d stale=%d failed=%d done=%d"
                         % (c["pending"], c["running"], c["stale"], c["failed"], c["done"]))
    m = load_manifest(job)
    root = os.path.realpath(job)
    output = os.path.realpath(output)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    tmp = os.path.join(os.path.dirname(output), ".%s.%s.tmp" % (os.path.basename(output), uuid.uuid4().hex))
    rows_total = 0
    out_sha = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for s in m["shards"]:
                rec = json.load(open(os.path.join(job, "state", "done", s["id"] + ".json")))
                path = os.path.realpath(os.path.join(root, rec["output_path"]))
                if not path.startswith(root + os.sep):
                    raise ValueError("result outside the job folder: %s" % path)
                sha, rows, last = hashlib.sha256(), 0, b"\n"
                with open(path, "rb") as f:
                    for raw in f:
                        rows += 1
                        strict_line(raw.rstrip(b"\n"), path, rows)
                        sha.update(raw)
                        out_sha.update(raw)
                        out.write(raw)
                        last = raw[-1:]
                if last != b"\n":
                    out.write(b"\n")
                    out_sha.update(b"\n")
                if rows != rec["rows"] or sha.hexdigest() != rec["sha256"]:
                    raise ValueError("Result checksum or row count mismatch for %s" % s["id"])
                rows_total += rows
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return rows_total, out_sha.hexdigest()


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "status":
        st = collect_status(sys.argv[2])
        print(json.dumps(st, indent=2, sort_keys=True))
        return 0 if st["complete"] else 2 if st["counts"]["failed"] else 1
    if len(sys.argv) >= 4 and sys.argv[1] == "merge":
        try:
            rows, sha = merge(sys.argv[2], sys.argv[3])
        except (OSError, ValueError) as e:
            sys.stderr.write("ERROR: %s\n" % e)
            return 2
        print("Merged %d rows into %s (%s)" % (rows, sys.argv[3], sha))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
