#!/usr/bin/env python3
"""Exactly-once check of a finished job folder, shared by the e2e tests.

usage: exactly_once.py JOB [--fence] [--uncounted] [--stale-ok]

Every shard of the manifest has a done record; exactly one attempt says "done", and it is the
one attempt whose token the record carries. --fence: the shard's lock is its done fence,
pointing at the record. --uncounted: no attempt of the job counted toward the retry limit
(no "failed"; no "stale" either unless --stale-ok). Prints each bad shard; exit 1 if any.
"""
import glob
import json
import os
import sys

args = sys.argv[1:]
opts = {a for a in args if a.startswith("--")}
unknown = opts - {"--fence", "--uncounted", "--stale-ok"}
pos = [a for a in args if not a.startswith("--")]
if len(pos) != 1 or unknown:
    sys.exit(__doc__.strip().splitlines()[2])
job = pos[0]
bad = []
for s in json.load(open(os.path.join(job, "manifest.json")))["shards"]:
    sid = s["id"]
    rec = json.load(open(os.path.join(job, "state", "done", sid + ".json")))
    atts = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", sid, "*", "attempt.json"))]
    done = [a for a in atts if a.get("status") == "done"]
    same = [a for a in atts if a.get("token") == rec.get("token")]
    if len(done) != 1 or len(same) != 1 or done[0].get("token") != rec.get("token"):
        bad.append((sid, rec.get("token"), [(a.get("token"), a.get("status")) for a in atts]))
    if "--fence" in opts:
        fence = json.load(open(os.path.join(job, "state", "locks", sid + ".lock")))
        if fence.get("status") != "done" or fence.get("terminal_path") != "state/done/%s.json" % sid:
            bad.append((sid, "fence", fence))
    if "--uncounted" in opts:
        counted = {"failed"} | (set() if "--stale-ok" in opts else {"stale"})
        if any(a.get("status") in counted for a in atts):
            bad.append((sid, "an attempt counted toward the retry limit", [a.get("status") for a in atts]))
for b in bad:
    print("bad:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
