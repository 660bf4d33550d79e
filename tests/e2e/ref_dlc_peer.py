#!/usr/bin/env python3
"""One instance of the reference's worker-broadcast job (dlc_job.py dlc), by the rules of its
coordination (README "PAI-DLC worker-broadcast jobs": the coordination folder, its files, elections
and waits), for the interop test. Like the reference it runs the single-step commands as children:
here eshard-mpi's prepare, worker and verify play shard_job's part.

usage: ref_dlc_peer.py BIN JOB RUN_ID TIMEOUT POLL -- PREPARE_ARGS... -- WORKER_ARGS...
Exit code: the submission's (prepare result, abort record or finalize result), as dlc's.
"""
import hashlib, json, os, socket, subprocess, sys, time, uuid
from datetime import datetime, timezone

BIN, JOB, RUN_ID, TIMEOUT, POLL = sys.argv[1:6]
TIMEOUT, POLL = float(TIMEOUT), float(POLL)
rest = sys.argv[7:]
PREP, WORK = rest[:rest.index("--")], rest[rest.index("--") + 1:]
HOST = socket.gethostname()
JOB = os.path.realpath(JOB)
COORD = os.path.join(os.path.dirname(JOB), "." + os.path.basename(JOB) + ".dlc-coordination",
                     hashlib.sha256(RUN_ID.encode()).hexdigest()[:20])


def now():
    return datetime.now(timezone.utc).isoformat()


def child(args):
    print("$ " + " ".join(args), flush=True)
    return subprocess.call([BIN] + args)


def atomic(name, doc):
    path = os.path.join(COORD, name)
    tmp = os.path.join(COORD, ".%s.%d.%s.tmp" % (name, os.getpid(), uuid.uuid4().hex))
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def elect(phase):
    try:
        fd = os.open(os.path.join(COORD, phase + ".lock"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    doc = {"created_at": now(), "hostname": HOST, "phase": phase, "pid": os.getpid()}
    os.write(fd, (json.dumps(doc, sort_keys=True) + "\n").encode())
    os.fsync(fd)
    os.close(fd)
    return True


def result(name):
    try:
        with open(os.path.join(COORD, name)) as f:
            code = json.load(f)["return_code"]
    except FileNotFoundError:
        return None
    if not isinstance(code, int):
        raise ValueError("bad return_code in " + name)
    return code


def publish_result(phase, code):
    atomic(phase + "-result.json", {"finished_at": now(), "hostname": HOST, "phase": phase, "return_code": code})


def wait_for(name, what, manifest_before=True):
    deadline = time.monotonic() + TIMEOUT
    while True:
        if not manifest_before and os.path.exists(os.path.join(JOB, "manifest.json")):
            return 0
        code = result(name)
        if code is not None:
            return code
        if time.monotonic() >= deadline:
            print("ERROR: timed out after %gs waiting for DLC %s. Check whether another worker exited "
                  "unexpectedly." % (TIMEOUT, what), file=sys.stderr)
            return 2
        time.sleep(POLL)


def abort(code, reason):
    if result("abort.json") is None and elect("abort"):
        atomic("abort.json", {"finished_at": now(), "hostname": HOST, "phase": "worker", "reason": reason,
                              "return_code": code})
    return wait_for("abort.json", "abort")


def terminal(ids):
    deadline = time.monotonic() + TIMEOUT
    while True:
        code = result("abort.json")
        if code is not None:
            return code
        done = sum(os.path.exists(os.path.join(JOB, "state", "done", i + ".json")) for i in ids)
        failed = sum(os.path.exists(os.path.join(JOB, "state", "failed", i + ".json")) for i in ids)
        if failed:
            return abort(2, "%d shard(s) reached terminal failure" % failed)
        if done == len(ids):
            return 0
        if time.monotonic() >= deadline:
            return abort(2, "timed out after %gs waiting for all shards (%d/%d done)" % (TIMEOUT, done, len(ids)))
        time.sleep(POLL)


def main():
    os.makedirs(COORD, exist_ok=True)
    print("DLC instance hostname=%s starting; coordination_generation=%s." % (HOST, os.path.basename(COORD)),
          flush=True)
    code = result("prepare-result.json")
    if code is None:
        before = os.path.exists(os.path.join(JOB, "manifest.json"))
        if elect("prepare"):
            print("hostname=%s elected as DLC prepare coordinator." % HOST, flush=True)
            code = child(["prepare", "--job-dir", JOB] + PREP)
            publish_result("prepare", code)
        else:
            code = wait_for("prepare-result.json", "preparation", before)
    if code:
        return code
    for name in ("finalize-result.json", "abort.json"):
        code = result(name)
        if code is not None:
            return code
    print("Starting DLC worker on hostname=%s; this invocation will handle an unlimited number of shard "
          "claims." % HOST, flush=True)
    rc = child(["worker", "--job-dir", JOB] + WORK)
    if rc:
        return abort(rc, "worker on hostname=%s exited with code %d" % (HOST, rc))
    with open(os.path.join(JOB, "manifest.json")) as f:
        ids = [s["id"] for s in json.load(f)["shards"]]
    code = terminal(ids)
    if code:
        return code
    code = result("finalize-result.json")
    if code is not None:
        return code
    if not elect("finalize"):
        return wait_for("finalize-result.json", "final verification")
    print("hostname=%s elected as DLC finalize coordinator." % HOST, flush=True)
    code = child(["verify", "--job-dir", JOB, "--output", os.path.join(JOB, "merged.jsonl")])
    publish_result("finalize", code)
    return code


if __name__ == "__main__":
    sys.exit(main())
