#!/usr/bin/env python3
"""Make a prepared job finished as workers leave it, without running a shard (the benchmarks'
large finished jobs: running 100,000 shards through workers takes an hour).

    finish_job.py JOB [--results] [--limit K] [--events]

For every shard of JOB's manifest that has no done record yet: a done record (state/done/<id>.json) and its done fence
(state/locks/<id>.lock, holding a copy of the record), as docs/job-folder.md describes them.
With --results, also the attempt folder attempts/<id>/0001-<token>/ with its attempt.json and
its result (the shard's input, copied), and the record's sha256 and size_bytes: a job that
status and merge accept. Without it, the records name results that are not there (what
tests/bench/scale.sh's idle tail has always used). With --limit K, only the first K such shards
in the manifest's order (a job finished but for its last shards, which a later call finishes).
With --events, each shard's "claim" and "done" events too, after its files, in one event log of
this call (state/events/<host>.<pid>.<token8>.jsonl, docs/job-folder.md#events), as a worker
writes them: what a kept view learns from which shards changed.
"""
import datetime
import hashlib
import json
import os
import secrets
import sys
import time


def main():
    usage = "usage: finish_job.py JOB [--results] [--limit K] [--events]"
    args, results, limit, events = sys.argv[2:], False, -1, False
    while args:
        if args[0] == "--results":
            results, args = True, args[1:]
        elif args[0] == "--events":
            events, args = True, args[1:]
        elif args[0] == "--limit" and len(args) > 1 and args[1].isdigit():
            limit, args = int(args[1]), args[2:]
        else:
            sys.exit(usage)
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(usage)
    job = sys.argv[1]
    iso = datetime.datetime.now(datetime.timezone.utc).isoformat()
    host = "bench" if results else "bench-done"
    log = None
    if events:
        os.makedirs(os.path.join(job, "state", "events"), exist_ok=True)
        name = "%s.%d.%s.jsonl" % (host, os.getpid(), secrets.token_hex(4))
        log = os.open(os.path.join(job, "state", "events", name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND,
                      0o644)
    for s in json.load(open(os.path.join(job, "manifest.json")))["shards"]:
        sid, tok = s["id"], secrets.token_hex(16)
        if os.path.exists(os.path.join(job, "state", "done", sid + ".json")):
            continue  # a worker finished it: it stays as the worker left it
        if limit == 0:
            break
        limit -= 1
        rel = "attempts/%s/0001-%s" % (sid, tok)
        rec = {"attempt_number": 1, "completed_at": iso, "hostname": host, "output_path": rel + "/processed.jsonl",
               "rows": s["rows"], "shard_id": sid, "status": "done", "token": tok}
        if results:
            data = open(os.path.join(job, s["path"]), "rb").read()
            os.makedirs(os.path.join(job, rel))
            with open(os.path.join(job, rel, "processed.jsonl"), "wb") as f:
                f.write(data)
            att = {"attempt_number": 1, "claimed_at": iso, "claimed_at_epoch": time.time(), "ended_at": iso,
                   "hostname": host, "pid": 1, "shard_id": sid, "status": "done", "token": tok}
            with open(os.path.join(job, rel, "attempt.json"), "w") as f:
                json.dump(att, f, indent=2, sort_keys=True)
            rec["sha256"] = hashlib.sha256(data).hexdigest()
            rec["size_bytes"] = len(data)
        with open(os.path.join(job, "state", "done", sid + ".json"), "w") as f:
            json.dump(rec, f, indent=2, sort_keys=True)
        fence = {"attempt_dir": rel, "attempt_number": 1, "claimed_at": iso, "claimed_at_epoch": time.time(),
                 "heartbeat": 0, "hostname": host, "lease_secs": 120.0, "pid": 1, "record": rec, "shard_id": sid,
                 "status": "done", "terminal_at": iso, "terminal_path": "state/done/%s.json" % sid, "token": tok}
        with open(os.path.join(job, "state", "locks", sid + ".lock"), "w") as f:
            f.write(json.dumps(fence, sort_keys=True, separators=(",", ":")))
        if log is not None:
            for ev in ("claim", "done"):
                line = {"attempt": 1, "event": ev, "host": host, "pid": os.getpid(), "shard": sid,
                        "time": time.time(), "at": iso, "token": tok}
                if ev == "done":
                    line["rows"] = s["rows"]
                os.write(log, (json.dumps(line, sort_keys=True) + "\n").encode())
    if log is not None:
        os.close(log)


if __name__ == "__main__":
    main()
