#!/bin/bash
# README's Prometheus recipe ("Watching a job", status --prometheus), run as it is printed there
# against a running, a failed and a complete job (issue 35, item 4): status --prometheus exits 0
# whenever it printed the metrics, so the recipe publishes eshard.prom every time, with the
# job's state in it, and no eshard.prom.<pid> piles up; for a job that cannot be read status
# exits 2, the file published before stays and the recipe leaves no temporary either.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh" # wait_for
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
write_recipe "$T/recipe.yaml"
printf '{"id":%d,"text":"row %d"}\n' 1 1 2 2 3 3 4 4 >"$T/in.jsonl"
D=$T/textfile
mkdir -p "$D"

# The recipe: README's code block that runs status --prometheus, with its folders and binary
# replaced by this test's.
python3 - "$SRC/README.md" "$D" >"$T/recipe.sh" <<'PY' || fail "no Prometheus recipe in README.md"
import re, sys
blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", open(sys.argv[1], encoding="utf-8").read(), re.M | re.S)
mine = [b for b in blocks if "--prometheus >" in b]
assert len(mine) == 1, "expected one code block with the recipe, found %d" % len(mine)
text = mine[0].replace("/var/lib/node_exporter/textfile", sys.argv[2])
text = re.sub(r"^eshard-mpi ", '"$ESHARD_BIN" ', text, flags=re.M)
assert "/shared/jobs/j1" in text and "$ESHARD_BIN" in text, text
print(text.replace("/shared/jobs/j1", '"$1"'), end="")
PY
# publish JOB: run the recipe for JOB; published WHAT: it exited 0 and published a file.
publish() { local rc=0; bash "$T/recipe.sh" "$1" >"$T/out" 2>"$T/err" || rc=$?; echo "$rc" >"$T/rc"; }
published() {
  [ "$(cat "$T/rc")" = 0 ] && [ -s "$D/eshard.prom" ] ||
    { cat "$T/err"; fail "the recipe published nothing for $1 (exit $(cat "$T/rc"))"; }
}
# metric NAME [LABELS]: the value of one sample of the published file.
metric() { sed -n "s/^$1{job=\"[^\"]*\"${2:-}} //p" "$D/eshard.prom"; }
only_published() {
  [ "$(ls -A "$D")" = eshard.prom ] || { ls -la "$D"; fail "the collector's folder holds more than eshard.prom after $1"; }
}
cat >"$T/cp.sh" <<'EOF'
#!/bin/sh
cp "$1" "$2"
EOF
cat >"$T/fail.sh" <<'EOF'
#!/bin/sh
echo "failing on purpose" >&2
exit 3
EOF
# Waits (at most 60 s) until the test lets it go, so its shard is running meanwhile.
cat >"$T/hold.sh" <<EOF
#!/bin/sh
for i in \$(seq 600); do [ -e "$T/go" ] && break; sleep 0.1; done
cp "\$1" "\$2"
EOF
chmod +x "$T/cp.sh" "$T/fail.sh" "$T/hold.sh"
prep() { run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$1" \
  --num-shards 2 --max-retries 0 --process-cmd "$2 {input} {output}"; }

# ---- a running job: one worker holds a shard
JR=$T/running
prep "$JR" "$T/hold.sh"
"$BIN" worker --job-dir "$JR" --max-shards 1 >"$T/worker.out" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null || true; test_done' EXIT
has_lock() { [ -n "$(ls "$JR/state/locks" 2>/dev/null)" ]; }
wait_for 30 has_lock
publish "$JR"
published "a running job"
[ "$(metric eshard_shards ',state="running"')" = 1 ] || { cat "$D/eshard.prom"; fail "the published file does not show the running shard"; }
[ "$(metric eshard_job_terminal)" = 0 ] || fail "a running job published as terminal"
only_published "a running job"
touch "$T/go"
wait "$worker" || fail "the worker of the running job failed"
pass "a running job: the recipe published its metrics (status --prometheus exited 0)"

# ---- a failed job
JF=$T/failed
prep "$JF" "$T/fail.sh"
run_expect 2 "$BIN" worker --job-dir "$JF"
run_expect 2 "$BIN" status --job-dir "$JF"
publish "$JF"
published "a failed job"
[ "$(metric eshard_shards ',state="failed"')" = 2 ] || { cat "$D/eshard.prom"; fail "the published file does not show the failed shards"; }
[ "$(metric eshard_job_terminal) $(metric eshard_job_complete)" = "1 0" ] || fail "a failed job published as not terminal or complete"
only_published "a failed job"
pass "a failed job: the recipe published its metrics"

# ---- a complete job
JC=$T/complete
prep "$JC" "$T/cp.sh"
run_expect 0 "$BIN" worker --job-dir "$JC"
publish "$JC"
published "a complete job"
[ "$(metric eshard_shards ',state="done"') $(metric eshard_job_complete)" = "2 1" ] ||
  { cat "$D/eshard.prom"; fail "the published file does not show the complete job"; }
grep -q "^eshard_shards{job=\"complete\",state=\"done\"} 2$" "$D/eshard.prom" || fail "the metrics are not the complete job's"
only_published "a complete job"
pass "a complete job: the recipe published its metrics"

# ---- a job that cannot be read: status exits 2, the last published file stays, the recipe
# removes its temporary
cp "$D/eshard.prom" "$T/before.prom"
publish "$T/no-such-job"
grep -q "Job manifest not found" "$T/err" || { cat "$T/err"; fail "no error for a missing job"; }
cmp -s "$T/before.prom" "$D/eshard.prom" || fail "a failed status replaced the published file"
only_published "a missing job"
run_expect 2 "$BIN" status --job-dir "$T/no-such-job" --prometheus
pass "a missing job: exit 2, the published file kept, no temporary left"
