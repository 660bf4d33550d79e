#!/bin/bash
# Chaos: `mpirun -np 4 eshard-mpi run` on 4 fake hosts (fakehosts.sh) while the processor fails
# at random and processors and whole ranks are SIGKILLed at random moments; the same command
# (with --retry-failed, backups on as by default) is submitted again until it passes, at most
# MAX_ROUNDS times. The faults are random but seeded (CHAOS_SEED, printed; set it to replay a
# schedule); the checks hold whatever the schedule:
#   - PASS within the bounded number of rounds (the last rounds have no faults);
#   - exactly once: one done record per shard, whose token is the one attempt that says done;
#   - the merged output is byte-identical to a fault-free run's;
#   - no debris: no running lock, temporary, stage folder or live processor left.
# It prints the rounds, attempts, takeovers, backups and the wall time against the no-fault run.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 4
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

SEED=${CHAOS_SEED:-$(( $(date +%s%N) % 100000 ))}
echo "chaos seed: $SEED (CHAOS_SEED=$SEED replays this schedule)"
RANDOM=$SEED
FAULT_ROUNDS=4      # rounds 1..4 have faults; the rounds after them none
MAX_ROUNDS=8
SHARDS=16
FAILPCT=20          # percent of attempts whose processor fails, in the faulty rounds

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(360):
        f.write(json.dumps({"id": i, "text": "chaos row %d " % i + "c" * (i * 7 % 53)}) + "\n")
PY
mkdir -p "$T/procs"
echo 0 >"$T/round"
# The processor: its fate is a hash of the seed, the round, the shard and the attempt number.
# In a faulty round FAILPCT% of attempts fail and 1 in 12 are slow (3 s, so that backups start);
# the others take 0.3-0.7 s. It registers its pid in $T/procs for the child killer.
cat >"$T/proc.sh" <<EOF
#!/bin/sh
echo \$\$ >"$T/procs/\$\$"
trap 'rm -f "$T/procs/\$\$"' EXIT
round=\$(cat "$T/round")
a=\$(basename "\$4"); a=\${a%%-*}
h=\$(printf '%s' "$SEED.\$round.\$3.\$a" | cksum | cut -d' ' -f1)
if [ "\$round" -ge 1 ] && [ "\$round" -le $FAULT_ROUNDS ]; then
  if [ \$((h % 100)) -lt $FAILPCT ]; then echo "chaos: failing \$3 attempt \$a" >&2; exit 3; fi
  if [ \$((h / 100 % 12)) = 0 ]; then sleep 3; fi
fi
sleep 0.\$((3 + h / 1200 % 5))
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"
CMD=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards $SHARDS
  --process-cmd "$T/proc.sh {input} {output} {shard_id} {attempt_dir}"
  --lease-secs 2 --heartbeat-secs 0.4 --max-retries 3 --preempt-grace-secs 0.5 --retry-failed)
# shellcheck disable=SC2086
fake_mpirun() { timeout 90 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "$@"; }
secs() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }

# ---- the run without faults: the reference output and wall time
ranks_reset
t0=$(now)
run_expect 0 fake_mpirun "${CMD[@]}" --job-dir "$T/ref"
t1=$(now)
expect_out "PASS: $SHARDS shards were completed"
REF_WALL=$(secs "$t0" "$t1")

# kill_child: SIGKILL one running processor of this test (its pid file, checked to be ours).
kill_child() {
  local f pid
  for f in $(ls "$T/procs" 2>/dev/null | shuf -n 1 --random-source=<(yes "$1")); do
    pid=$f
    grep -qF "$T/proc.sh" "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null && echo "child $pid"
  done
}
# kill_rank R: SIGKILL rank R's eshard-mpi process (ranks.sh records its pid).
kill_rank() {
  local pid
  pid=$(cat "$T/ranks/pid.$1" 2>/dev/null) || return 0
  grep -qF "$BIN" "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null && echo "rank $1"
}

# after TENTHS CMD...: run CMD that many tenths of a second from now, unless the round ended.
after() {
  local n=$1 i; shift
  for i in $(seq "$n"); do sleep 0.1; [ -e "$T/live" ] || return 0; done
  "$@"
}

# ---- chaos rounds: the same command again until PASS
J=$T/job
t0=$(now)
round=0 rc=1
while [ "$round" -lt "$MAX_ROUNDS" ]; do
  round=$((round + 1))
  echo "$round" >"$T/round"
  ranks_reset
  : >"$T/killed"
  touch "$T/live"
  killers=()
  plan="no faults"
  if [ "$round" -le "$FAULT_ROUNDS" ]; then
    # The schedule is drawn here, from the seeded RANDOM: a whole rank in the first round (1.5-4.5
    # s in, while the job works) and in 2 later rounds out of 3 (0.5-6 s in), and up to 3
    # processors, each at its own moment (0.5-6 s into the round).
    plan="processor failures ${FAILPCT}%"
    if [ "$round" = 1 ] || [ $((RANDOM % 3)) -lt 2 ]; then
      victim=$((RANDOM % 4)) at=$((5 + RANDOM % 55))
      [ "$round" != 1 ] || at=$((15 + RANDOM % 30))
      plan="$plan, rank $victim at $((at / 10)).$((at % 10)) s"
      after "$at" kill_rank "$victim" >>"$T/killed" &
      killers+=($!)
    fi
    for c in $(seq 1 $((RANDOM % 4))); do
      at=$((5 + RANDOM % 55)) pick=$RANDOM
      plan="$plan, a child at $((at / 10)).$((at % 10)) s"
      after "$at" kill_child "$pick" >>"$T/killed" &
      killers+=($!)
    done
  fi
  rc=0
  fake_mpirun "${CMD[@]}" --job-dir "$J" >"$T/out" 2>"$T/err" || rc=$?
  rm -f "$T/live"
  for k in "${killers[@]}"; do wait "$k" || true; done
  [ "$rc" != 124 ] || { tail -30 "$T/err"; fail "round $round: mpirun hung (seed $SEED)"; }
  echo "round $round: exit $rc; planned: $plan; killed: $(tr '\n' ' ' <"$T/killed")"
  if [ "$rc" = 0 ]; then
    grep -q "^PASS: $SHARDS shards were completed" "$T/out" || { cat "$T/out"; fail "round $round: exit 0 without PASS (seed $SEED)"; }
    break
  fi
  # A round after the faulty ones may still end 2: a lock of a rank killed in the last faulty
  # round is taken over and counted, which can reach a shard's limit; the next round requeues it.
  [ "$round" -le "$FAULT_ROUNDS" ] || [ "$rc" = 2 ] || { tail -30 "$T/err"; fail "round $round had no faults and exited $rc (seed $SEED)"; }
done
t1=$(now)
[ "$rc" = 0 ] || { tail -30 "$T/err"; fail "no PASS after $MAX_ROUNDS rounds (seed $SEED)"; }
WALL=$(secs "$t0" "$t1")

# ---- the checks
cmp -s "$T/ref/merged.jsonl" "$J/merged.jsonl" || fail "merged output differs from the fault-free run's (seed $SEED)"
python3 - "$J" <<'PY' || fail "results are not exactly one per shard (seed $SEED)"
import glob, json, os, sys
job = sys.argv[1]
bad = []
for s in json.load(open(os.path.join(job, "manifest.json")))["shards"]:
    sid = s["id"]
    recs = glob.glob(os.path.join(job, "state", "done", sid + ".json"))
    rec = json.load(open(recs[0])) if recs else {}
    atts = [json.load(open(p)) for p in glob.glob(os.path.join(job, "attempts", sid, "*", "attempt.json"))]
    done = [a for a in atts if a.get("status") == "done"]
    if len(recs) != 1 or len(done) != 1 or done[0].get("token") != rec.get("token"):
        bad.append((sid, rec.get("token"), [(a.get("token"), a.get("status")) for a in atts]))
for b in bad:
    print("bad:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
[ -z "$(running_locks "$J")" ] || fail "running locks left: $(running_locks "$J") (seed $SEED)"
[ "$(fence_counts "$J")" = "$SHARDS 0 0" ] || fail "locks are not one done fence per shard: $(fence_counts "$J") (seed $SEED)"
debris=$(find "$T" -maxdepth 7 \( -name '.*.tmp' -o -name '.*.preparing.*' \) | head -5)
[ -z "$debris" ] || { for d in $debris; do echo "$d: $(cat "$(dirname "$d")/attempt.json" 2>/dev/null | tr -d '\n')"; done; fail "debris left: $debris (seed $SEED)"; }
sleep 0.5
for f in $(ls "$T/procs"); do
  ! grep -qF "$T/proc.sh" "/proc/$f/cmdline" 2>/dev/null || fail "processor $f still runs after the job ended (seed $SEED)"
done

# ---- the figures
python3 - "$J" "$SEED" "$round" "$WALL" "$REF_WALL" "$SHARDS" <<'PY'
import collections, glob, json, os, sys
job, seed, rounds, wall, ref, shards = sys.argv[1:]
st = collections.Counter()
for p in glob.glob(os.path.join(job, "attempts", "*", "*", "attempt.json")) + \
         glob.glob(os.path.join(job, "state", "history", "attempts", "*", "*", "attempt.json")):
    try:
        st[json.load(open(p)).get("status", "?")] += 1
    except Exception:
        st["unreadable"] += 1
ev = collections.Counter()
for p in glob.glob(os.path.join(job, "state", "events", "*.jsonl")):
    for line in open(p):
        try:
            ev[json.loads(line).get("event")] += 1
        except Exception:
            pass
# A takeover marks the attempt it took over stale: it moved the lock into state/stale_locks/,
# or fenced it with the record a backup of that attempt published.
takeovers = st["stale"]
print("chaos seed %s: PASS after %s round(s); %d attempts for %s shards (%s); %d takeovers, %d backups; "
      "wall %s s against %s s without faults (%.1fx)" % (
      seed, rounds, sum(st.values()), shards, ", ".join("%s %d" % kv for kv in sorted(st.items())),
      takeovers, ev["backup"], wall, ref, float(wall) / float(ref)))
PY
pass "chaos (seed $SEED): exactly once, output identical to the fault-free run, no debris"
