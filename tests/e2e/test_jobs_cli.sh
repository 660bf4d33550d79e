#!/bin/bash
# status, retry, merge and verify through the real binary on a prepared job whose shards are
# "processed" by hand: done records (made with python3) point at copies of the shards.
# Checks exit codes and the reference's messages (docs/design.md#exit-codes,
# docs/job-folder.md#status-of-a-shard, docs/design.md#verify).
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "x" * (i % 7)}) + "\n")
PY
J=$T/job
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" --num-shards 4
S0=part-00000-of-00004 S1=part-00001-of-00004 S2=part-00002-of-00004 S3=part-00003-of-00004

# fake_done SHARD HOST: a done record pointing at a copy of the shard, as if processed by cp.
fake_done() {
  python3 - "$J" "$1" "$2" <<'PY'
import hashlib, json, os, sys, time, uuid
job, sid, host = sys.argv[1:]
tok = uuid.uuid4().hex
rel = "attempts/%s/0001-%s" % (sid, tok)
os.makedirs(os.path.join(job, rel))
data = open(os.path.join(job, "shards", sid + ".jsonl"), "rb").read()
open(os.path.join(job, rel, "processed.jsonl"), "wb").write(data)
now = time.time()
att = {"attempt_dir": rel, "attempt_number": 1, "claimed_at_epoch": now - 3, "hostname": host,
       "shard_id": sid, "status": "done", "token": tok}
with open(os.path.join(job, rel, "attempt.json"), "w") as f:
    json.dump(att, f, indent=2, sort_keys=True)
rec = {"attempt_number": 1, "completed_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now)),
       "executor_type": "ray", "hostname": host, "output_path": rel + "/processed.jsonl", "pid": 1,
       "ray_address": "local", "ray_output_files": [], "rows": data.count(b"\n"),
       "sha256": hashlib.sha256(data).hexdigest(), "shard_id": sid, "size_bytes": len(data),
       "status": "done", "token": tok}
with open(os.path.join(job, "state", "done", sid + ".json"), "w") as f:
    json.dump(rec, f, indent=2, sort_keys=True)
    f.write("\n")
PY
}

for c in status retry merge verify; do
  run_expect 0 "$BIN" $c --help
  expect_out "usage: eshard-mpi $c"
done

# ---- status on a fresh job
run_expect 1 "$BIN" status --job-dir "$J"
expect_out "Job job: executor=ray ray_address=local total=4 pending=4 running=0 stale=0 done=0 failed=0"
expect_out "Progress: 0/4 shards done, 0/40 rows (0.0%), rate unknown, ETA unknown"
run_expect 1 "$BIN" status --job-dir "$J" --all
expect_out "  $S3: pending"
run_expect 1 "$BIN" status --job-dir "$J" --json --all
[ "$(json_get "$T/out" '["counts"]["pending"]')" = 4 ] || fail "json pending"
[ "$(json_get "$T/out" '["complete"]')" = False ] || fail "json complete"
[ "$(json_get "$T/out" '["shards"][0]["shard_id"]')" = "$S0" ] || fail "json shard order"
run_expect 2 "$BIN" status --job-dir "$T/nope"
expect_err "ERROR: Job manifest not found"
run_expect 2 "$BIN" status
expect_err "--job-dir is required"
run_expect 2 "$BIN" status --job-dir "$J" --lock-timeout-secs 0
pass "status of a fresh job"

# ---- two done, one failed (with an old attempt), one running
fake_done $S0 node-a
fake_done $S1 node-b
echo '{"shard_id": "'$S2'", "status": "failed", "last_error": "boom"}' >"$J/state/failed/$S2.json"
mkdir -p "$J/attempts/$S2/old-attempt"
echo '{"attempt_dir": "attempts/'$S3'/0001-x", "hostname": "node-c", "pid": 7, "heartbeat": 2, "shard_id": "'$S3'", "token": "t"}' \
  >"$J/state/locks/$S3.lock"
run_expect 2 "$BIN" status --job-dir "$J" --all
expect_out "total=4 pending=0 running=1 stale=0 done=2 failed=1"
expect_out "  $S0: done owner=node-a"
expect_out "  $S2: failed"
expect_out "  $S3: running owner=node-c"
expect_out "Hosts:"
# Older than the lease (120 s by default): stale.
touch -d '-10 minutes' "$J/state/locks/$S3.lock"
run_expect 2 "$BIN" status --job-dir "$J" --json
[ "$(json_get "$T/out" '["counts"]["stale"]')" = 1 ] || fail "lease-stale lock not stale"
[ "$(json_get "$T/out" '["shards"][2]["error"]')" = boom ] || fail "failed error"
[ "$(json_get "$T/out" '["shards"][3]["heartbeat"]')" = 2 ] || fail "heartbeat"
run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/merged.jsonl"
expect_err "ERROR: Cannot merge an incomplete job: pending=0 running=0 stale=1 failed=1 done=2"
[ ! -e "$T/merged.jsonl" ] || fail "merge of an incomplete job wrote its output"
pass "status classification and incomplete merge"

# ---- retry
run_expect 2 "$BIN" retry --job-dir "$J"
expect_err "one of --all-failed or --shard-id is required"
run_expect 2 "$BIN" retry --job-dir "$J" --all-failed --shard-id $S2
expect_err "mutually exclusive"
run_expect 2 "$BIN" retry --job-dir "$J" --shard-id zz --shard-id $S2 --shard-id aa
expect_err "ERROR: Unknown shard IDs: aa, zz"
run_expect 2 "$BIN" retry --job-dir "$J" --shard-id ../job
expect_err "Invalid shard ID '../job'"
cp "$J/state/failed/$S2.json" "$J/state/failed/$S3.json"
touch "$J/state/locks/$S3.lock" # a live lock (one past its lease beside a failed record is no obstacle)
run_expect 2 "$BIN" retry --job-dir "$J" --all-failed
expect_err "ERROR: Cannot retry $S3: a lock still exists"
[ -e "$J/state/failed/$S2.json" ] || fail "a refused retry moved something"
rm "$J/state/failed/$S3.json"
# A done shard named is refused (the help says so), and nothing moves.
run_expect 2 "$BIN" retry --job-dir "$J" --shard-id $S2 --shard-id $S0
expect_err "ERROR: Cannot retry $S0: it is already complete"
[ -e "$J/state/failed/$S2.json" ] || fail "a refused retry moved something"
run_expect 0 "$BIN" retry --job-dir "$J" --shard-id $S2
expect_out "Requeued $S2"
[ "$(wc -l <"$T/out")" = 1 ] || fail "retry printed more than one line"
[ ! -e "$J/state/failed/$S2.json" ] && [ ! -e "$J/attempts/$S2" ] || fail "retry left the failed shard in place"
compgen -G "$J/state/history/failed/$S2.*.json" >/dev/null || fail "no failed history"
compgen -G "$J/state/history/attempts/$S2.*/old-attempt" >/dev/null || fail "no attempts history"
run_expect 0 "$BIN" retry --job-dir "$J" --all-failed
expect_out "No failed shards selected"
pass "retry"

# ---- complete, merge
rm "$J/state/locks/$S3.lock"
fake_done $S2 node-a
fake_done $S3 node-b
run_expect 0 "$BIN" status --job-dir "$J"
expect_out "done=4 failed=0"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/out dir/merged.jsonl"
expect_out "Merged 4 shards and 40 rows into $T/out dir/merged.jsonl"
cat "$J"/shards/*.jsonl | cmp - "$T/out dir/merged.jsonl" || fail "merged output differs from the shards"
[ "$(json_get "$J/merge.json" '["sha256"]')" = "$(sha256sum "$T/out dir/merged.jsonl" | cut -d' ' -f1)" ] || fail "merge.json sha"
[ "$(json_get "$J/merge.json" '["rows"]')" = 40 ] || fail "merge.json rows"
[ "$(json_get "$J/merge.json" '["sha256"]')" = "$(json_get "$J/manifest.json" '["normalized_sha256"]')" ] || fail "sha vs manifest"
run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/out dir/merged.jsonl"
expect_err "ERROR: Output already exists: $T/out dir/merged.jsonl; pass --overwrite to replace it"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$T/out dir/merged.jsonl" --overwrite
# The default output, as run and verify have it.
run_expect 0 "$BIN" merge --job-dir "$J"
expect_out "Merged 4 shards and 40 rows into $J/merged.jsonl"
cmp "$J/merged.jsonl" "$T/out dir/merged.jsonl" || fail "default merge output differs"
# A tampered done record.
cp "$J/state/done/$S1.json" "$T/keep.json"
python3 - "$J/state/done/$S1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["rows"] += 1
json.dump(d, open(sys.argv[1], "w"), indent=2, sort_keys=True)
PY
run_expect 2 "$BIN" merge --job-dir "$J" --output "$T/out dir/merged.jsonl" --overwrite
expect_err "ERROR: Result checksum or row count mismatch for $S1"
cp "$T/keep.json" "$J/state/done/$S1.json"
if compgen -G "$T/out dir/.merged.jsonl.*.tmp" >/dev/null; then fail "merge left a temporary"; fi
pass "merge"

# ---- verify
run_expect 0 "$BIN" verify --job-dir "$J" --expect-nodes 2
expect_out "Shard owners:"
expect_out "  node-a: 2 shard(s)"
expect_out "  node-b: 2 shard(s)"
expect_out "PASS: 4 shards were completed by 2 node(s); merged 40 rows into $J/merged.jsonl"
cat "$J"/shards/*.jsonl | cmp - "$J/merged.jsonl" || fail "verify's merged output differs"
run_expect 2 "$BIN" verify --job-dir "$J" --expect-nodes 3
expect_err "ERROR: Verification failed: expected at least 3 distinct hostnames, found 2."
run_expect 0 "$BIN" verify --job-dir "$J" --output "$T/v.jsonl"
expect_out "merged 40 rows into $T/v.jsonl"
mv "$J/state/done/$S3.json" "$T/s3.json"
run_expect 1 "$BIN" verify --job-dir "$J"
expect_err "ERROR: Verification stopped: not all shards are complete."
pass "verify"

# ---- numbers past int64's range (undefined behaviour that the sanitizer build's UBSan stops
# at): prepare writes a lease of 1e301 s as a float (it cast the double to int64 to see whether
# it was whole), and status judges a running lock against a lock timeout of INT64_MAX s (it cast
# the timeout back from double, and (double)INT64_MAX does not fit).
JH=$T/job-huge
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$JH" --num-shards 2 \
  --heartbeat-secs 1e300 --lease-secs 1e301 --lock-timeout-secs 9223372036854775807
python3 - "$JH" <<'PY' || fail "prepare wrote other policy numbers"
import json, os, sys, time
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
p = m["policy"]
assert p["heartbeat_secs"] == 1e300 and p["lease_secs"] == 1e301, p
assert p["lock_timeout_secs"] == 9223372036854775807, p
sid = m["shards"][0]["id"]
lock = {"shard_id": sid, "token": "0" * 32, "hostname": "node-a", "pid": 1, "attempt_number": 1,
        "attempt_dir": "attempts/%s/0001-%s" % (sid, "0" * 32), "claimed_at_epoch": time.time(),
        "heartbeat": 0, "lease_secs": 1e301}
with open(os.path.join(job, "state", "locks", sid + ".lock"), "w") as f:
    json.dump(lock, f)
PY
run_expect 1 "$BIN" status --job-dir "$JH"
expect_out "running=1"
run_expect 1 "$BIN" status --job-dir "$JH" --lock-timeout-secs 9223372036854775807
expect_out "running=1"
pass "policy numbers past int64's range: written as floats, judged without an overflow"

# ---- waits past time_t's range (issue 35, item 5): status --watch --interval 1e300 and a
# worker's --progress-secs 9223372036854775807 wait "forever" (a century, as long as a timespec
# can say), where the sum of now and the wait was cast to a time_t out of range (undefined; on
# x86 a negative time: no wait at all, snapshots and progress lines as fast as they are made).
run_expect 124 timeout 3 "$BIN" status --job-dir "$JH" --watch --interval 1e300 --count 2
[ "$(grep -c '^--- ' "$T/out")" = 1 ] || { cat "$T/out"; fail "--interval 1e300 did not wait after the first snapshot"; }
printf '#!/bin/sh\ncp "$1" "$2"\n' >"$T/cp.sh"
chmod +x "$T/cp.sh"
JP=$T/job-progress
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$JP" --num-shards 2 \
  --process-cmd "$T/cp.sh {input} {output}"
run_expect 0 "$BIN" worker --job-dir "$JP" --progress-secs 9223372036854775807
! grep -q '^Progress: ' "$T/out" || { head -5 "$T/out"; fail "--progress-secs 9223372036854775807 printed progress lines"; }
pass "waits past time_t's range: --interval 1e300 and --progress-secs 9223372036854775807 wait"
