#!/bin/bash
# run's busy passes try each rank's own shards (issue 29, docs/design.md, "The worker loop"): rank r
# of n claims r, r + n, r + 2n, ... while they last, and a claim does not read the locks its
# peers made since its last look (at a file server, each is a lookup of a name its client has
# never seen, so a job's requests per shard grew with the ranks). Four ranks, 48 shards: each
# rank's claims are mostly its own shards, rank 1 (traced) reads few of its peers' locks, and
# the job is still done exactly once; a rank that finds its own shards gone takes the others'.
# With a lease of 4 s, the passes that try every shard once per quarter lease list state/done
# instead of reading the locks of every shard the peers finished since the last one.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
ranks_setup
command -v strace >/dev/null || fail "strace is not installed (scripts/install-deps.sh installs it)"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(96):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
# Shard 2 (rank 2's first) is slow: rank 2 is still on it when the others' own shards run out,
# so the end of the job shows the others taking rank 2's.
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
case $1 in *part-00002-*) sleep 4 ;; *) sleep 0.2 ;; esac
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
# Rank 1 runs under strace (its own calls only: the claim passes run on the main thread). In the
# sanitizer build its leak check is off: LeakSanitizer cannot run under ptrace (the other ranks
# keep theirs).
cat >"$T/trace.sh" <<EOF
#!/bin/bash
if [ "\${OMPI_COMM_WORLD_RANK:-}" = 1 ]; then
  export ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0"
  exec strace -o "$T/rank1.trace" -e trace=openat,openat2 "\$@"
fi
exec "\$@"
EOF
chmod +x "$T/trace.sh"

ranks_reset
run_expect 0 timeout 300 "$MPIRUN" --oversubscribe -np 4 "$T/rank.sh" "$T/trace.sh" "$BIN" run \
  --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 48 --process-cmd "$T/proc.sh {input} {output}" \
  --job-dir "$T/job" --output "$T/out.jsonl" --no-backup
ranks_expect 4 0
exactly_once "$T/job" --fence || fail "the job was not done exactly once"
[ "$(wc -l <"$T/out.jsonl")" = 96 ] || fail "merged $(wc -l <"$T/out.jsonl") rows, expected 96"
pass "4 ranks, 48 shards: done exactly once"

# Each rank's claims, from its event log (state/events/<host>.<pid>.*; the pid is the one
# rank.sh recorded, but rank 1's, which strace started as its child): of the shards of ranks
# 0, 1 and 3 (rank 2 is on its slow shard, and the others take its shards once theirs are gone),
# most were claimed by their own rank.
python3 - "$T/job/state/events" "$T/ranks" <<'PY' || fail "the ranks did not claim their own shards"
import glob, json, sys
rank_of = {open("%s/pid.%d" % (sys.argv[2], r)).read().strip(): r for r in (0, 2, 3)}
own = other = 0
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    r = rank_of.get(path.rsplit("/", 1)[1].split(".")[1], 1)
    for e in map(json.loads, open(path)):
        i = int(e["shard"].split("-")[1]) if e.get("event") == "claim" else 2
        if i % 4 != 2:
            own, other = own + (i % 4 == r), other + (i % 4 != r)
print("  shards of ranks 0, 1, 3: %d claimed by their own rank, %d by another" % (own, other))
sys.exit(0 if own + other == 36 and own >= 30 else 1)
PY
pass "each rank claimed its own shards"

# Rank 1's reads of its peers' locks (read-only opens of a lock of another class) while it
# claimed its own shards, up to the create of its last own lock: its first pass, not one lock a
# peer for each of its claims (the tail, where it takes rank 2's, reads them as before).
[ -s "$T/rank1.trace" ] || fail "rank 1 left no trace"
read -r claims reads <<<"$(python3 - "$T/rank1.trace" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
# A read names the lock's whole path; a claim's create names it from state/locks (the walk cache).
lock = re.compile(r'"(?:[^"]*/state/locks/)?part-(\d+)-of-00048\.lock", ([A-Z_|]+)')
opens = [(int(m.group(1)), "O_CREAT" in m.group(2), m.group(2).startswith("O_RDONLY")) for l in lines
         for m in [lock.search(l)] if m]
last = max((n for n, (i, create, _) in enumerate(opens) if create and i % 4 == 1), default=-1)
claims = sum(1 for i, create, _ in opens[:last + 1] if create and i % 4 == 1)
print(claims, sum(1 for i, _, ro in opens[:last + 1] if ro and i % 4 != 1))
PY
)"
echo "  rank 1: $claims claims of its own shards, $reads reads of its peers' locks meanwhile"
[ "$claims" -ge 6 ] || fail "rank 1 claimed only $claims of its own shards"
[ "$reads" -le 3 ] || fail "rank 1 read $reads of its peers' locks while it claimed its own shards (expected at most 3)"
pass "rank 1 claimed $claims of its own shards and read $reads of its peers' locks meanwhile"

# Rank 1's worker took the manifest without listing attempts/ to look for links: rank 0's
# prepare had done that before any rank worked (at 100,000 shards of a resumed job, a listing of
# 100,000 names per rank at a file server).
lists=$(grep -cF "\"$T/job/attempts\", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY" "$T/rank1.trace" || true)
[ "$lists" = 0 ] || fail "rank 1 listed attempts/ $lists time(s)"
pass "rank 1 did not list attempts/ to take the manifest"

# The pass that tries every shard once per quarter lease (a lease of 4 s here: every second)
# learns the shards its peers finished from one listing of state/done instead of reading their
# locks: over 160 shards, rank 1 reads its peers' running locks in each such pass (three, or a
# few more), not every lock of the shards they finished since its last one (before: about 90;
# at a file server each a lookup of a name its client never saw).
python3 - "$T/in2.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(160):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
printf '#!/bin/sh\nsleep 0.2\ncp "$1" "$2"\n' >"$T/proc2.sh"
chmod +x "$T/proc2.sh"
sed -i "s|$T/rank1.trace|$T/rank1-lease.trace|" "$T/trace.sh"
ranks_reset
run_expect 0 timeout 300 "$MPIRUN" --oversubscribe -np 4 "$T/rank.sh" "$T/trace.sh" "$BIN" run \
  --config "$T/recipe.yaml" --dataset-path "$T/in2.jsonl" --num-shards 160 --process-cmd "$T/proc2.sh {input} {output}" \
  --job-dir "$T/job2" --output "$T/out2.jsonl" --no-backup --lease-secs 4 --heartbeat-secs 1
ranks_expect 4 0
exactly_once "$T/job2" --fence || fail "the job of 160 shards was not done exactly once"
[ -s "$T/rank1-lease.trace" ] || fail "rank 1 left no trace"
read -r claims reads listings <<<"$(python3 - "$T/rank1-lease.trace" <<'PY'
import re, sys
lock = re.compile(r'"(?:[^"]*/state/locks/)?part-(\d+)-of-00160\.lock", ([A-Z_|]+)')
done = re.compile(r'"(?:[^"]*/)?state/done", [A-Z_|]*O_DIRECTORY')
events = []
for l in open(sys.argv[1]).read().splitlines():
    m = lock.search(l)
    if m:
        events.append(("lock", int(m.group(1)), "O_CREAT" in m.group(2), m.group(2).startswith("O_RDONLY")))
    elif done.search(l):
        events.append(("list", -1, False, False))
# Up to the create of rank 1's last own lock: the own phase, before the tail.
last = max((n for n, (k, i, create, _) in enumerate(events) if k == "lock" and create and i % 4 == 1), default=-1)
own = events[:last + 1]
print(sum(1 for k, i, create, _ in own if k == "lock" and create and i % 4 == 1),
      sum(1 for k, i, _, ro in own if k == "lock" and ro and i % 4 != 1),
      sum(1 for e in own if e[0] == "list"))
PY
)"
echo "  rank 1, lease 4 s: $claims claims of its own shards, $reads reads of its peers' locks, $listings listings of state/done meanwhile"
[ "$claims" -ge 20 ] || fail "rank 1 claimed only $claims of its own 40 shards"
[ "$listings" -ge 2 ] || fail "rank 1 listed state/done $listings times in its passes of every quarter lease (expected at least 2)"
[ "$reads" -le $((6 * (listings + 1))) ] ||
  fail "rank 1 read $reads of its peers' locks in $listings passes that listed state/done (expected at most 6 a pass)"
pass "passes of every quarter lease list state/done: $reads peers' locks read in $listings passes"

# The slow shard's rank had its own shards taken by the others once theirs were gone.
python3 - "$T/job/state/events" <<'PY' || fail "no rank took another's shard at the end"
import glob, json, sys
stolen = 0
for path in glob.glob(sys.argv[1] + "/*.jsonl"):
    idx = [int(e["shard"].split("-")[1]) for e in map(json.loads, open(path)) if e.get("event") == "claim"]
    if 2 in idx:
        continue
    stolen += sum(1 for i in idx if i % 4 == 2)
print("  shards of rank 2's class claimed by others: %d" % stolen)
sys.exit(0 if stolen > 0 else 1)
PY
pass "a rank whose own shards ran out took a slow rank's"
test_done
