#!/bin/bash
# eshard-mpi run on several hosts, faked on this machine (fakehosts.sh: each rank in its own UTS
# namespace named node1..node4, talking over the tcp BTL): strict mode on 4 hosts, the DLC
# MPIJob launcher, elastic mode on fewer hosts than --nodes, and strict mode refused on too
# few hosts with one message and the same exit code on every rank.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 4
ranks_setup
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(240):
        f.write(json.dumps({"id": i, "text": "row %d " % i + "z" * (i * 13 % 61)}) + "\n")
PY
# Each shard takes a little while, so that no rank can take its whole share before the others
# start (in elastic mode a fast rank may; strict mode caps it anyway).
cat >"$T/proc.sh" <<'EOF'
#!/bin/sh
sleep 0.3
cp "$1" "$2"
EOF
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 8 --process-cmd "$T/proc.sh {input} {output}")
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/ref"
run_expect 0 "$BIN" worker --job-dir "$T/ref"
run_expect 0 "$BIN" merge --job-dir "$T/ref" --output "$T/ref.jsonl"

# done_hosts JOB: the distinct hostnames of the done records, one a line, sorted.
done_hosts() {
  python3 - "$1" <<'PY'
import glob, json, sys
print("\n".join(sorted({json.load(open(f))["hostname"] for f in glob.glob(sys.argv[1] + "/state/done/*.json")})))
PY
}
# first_claims: the spread printed by rank 0, checked to be a number.
first_claims() {
  local s
  s=$(sed -n 's/^First claims of the ranks were \([0-9.]*\) s apart$/\1/p' "$T/out")
  [ -n "$s" ] || { cat "$T/out"; fail "no 'First claims of the ranks were X s apart' line"; }
  echo "$s"
}
# shellcheck disable=SC2086
fake_mpirun() { timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS "$@"; }

# ---- strict mode, 4 ranks on node1..node4
ranks_reset
run_expect 0 fake_mpirun -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" \
  --job-dir "$T/strict" --nodes 4 --require-all-nodes
ranks_expect 4 0
[ "$(sort "$T"/ranks/host.* | tr '\n' ' ')" = "node1 node2 node3 node4 " ] || fail "ranks ran on: $(cat "$T"/ranks/host.*)"
[ "$(done_hosts "$T/strict" | tr '\n' ' ')" = "node1 node2 node3 node4 " ] || fail "done records name: $(done_hosts "$T/strict")"
expect_out "on 4 rank(s), 4 host(s): nodes=4 shards=8 mode=strict cap=ceil(shards/nodes)"
expect_out "PASS: 8 shards were completed by 4 node(s); merged 240 rows"
for h in node1 node2 node3 node4; do expect_out "  $h: 2 shard(s)"; done
cmp "$T/ref.jsonl" "$T/strict/merged.jsonl" || fail "strict-mode output differs from the single-process run"
echo "strict mode: first claims $(first_claims) s apart"
pass "strict mode on 4 fake hosts: 4 distinct owners, every rank exited 0"

# ---- the DLC MPIJob launcher with a 4-host hostfile (it runs mpirun -np 4 -npernode 1)
# The launcher runs $ESHARD_BIN on every host: a wrapper records each rank's code.
cat >"$T/eshard-wrapped" <<EOF
#!/bin/sh
exec "$T/rank.sh" "$BIN" "\$@"
EOF
chmod +x "$T/eshard-wrapped"
ranks_reset
run_expect 0 env ESHARD_HOSTFILE="$FAKEHOSTS_HOSTFILE" ESHARD_MPIRUN="$MPIRUN" ESHARD_MPIRUN_ARGS="$FAKEHOSTS_AGENT_ARGS" \
  ESHARD_BIN="$T/eshard-wrapped" timeout 100 bash "$SRC/scripts/dlc-mpijob.sh" "${COMMON[@]}" \
  --job-dir "$T/dlc" --nodes 4 --require-all-nodes --output "$T/dlc.jsonl"
ranks_expect 4 0
expect_err "dlc-mpijob: 4 host(s) from $FAKEHOSTS_HOSTFILE; starting one eshard-mpi rank per host"
[ "$(done_hosts "$T/dlc" | tr '\n' ' ')" = "node1 node2 node3 node4 " ] || fail "DLC done records name: $(done_hosts "$T/dlc")"
cmp "$T/ref.jsonl" "$T/dlc.jsonl" || fail "DLC output differs from the single-process run"
echo "dlc-mpijob: first claims $(first_claims) s apart"
pass "scripts/dlc-mpijob.sh on a 4-host hostfile: one rank per host, strict mode passes"

# ---- elastic mode: --nodes 4 is only logged; 2 ranks on 2 hosts do all the work
ranks_reset
run_expect 0 fake_mpirun -np 2 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$T/elastic" --nodes 4
ranks_expect 2 0
expect_out "on 2 rank(s), 2 host(s): nodes=4 shards=8 mode=elastic cap=unlimited"
expect_out "PASS: 8 shards were completed by"
[ "$(done_hosts "$T/elastic" | tr '\n' ' ')" = "node1 node2 " ] || fail "elastic done records name: $(done_hosts "$T/elastic")"
cmp "$T/ref.jsonl" "$T/elastic/merged.jsonl" || fail "elastic output differs"
echo "elastic mode: first claims $(first_claims) s apart"
pass "elastic mode with --nodes 4 on 2 hosts passes"

# ---- strict mode on too few hosts: every rank exits 2, one message (from rank 0), nothing prepared
ranks_reset
# shellcheck disable=SC2086
run_expect 0 fake_mpirun $RANKS_NOABORT -np 2 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$T/few" --nodes 4 --require-all-nodes
ranks_expect 2 2
[ "$(grep -c 'ERROR' "$T/err")" = 1 ] || { cat "$T/err"; fail "expected exactly one ERROR line"; }
# mpirun itself (default settings) exits with the job's code.
run_expect 2 fake_mpirun -np 2 -npernode 1 "$BIN" run "${COMMON[@]}" --job-dir "$T/few" --nodes 4 --require-all-nodes
msg="strict mode (--require-all-nodes) needs 4 nodes, but the job's 2 rank(s) run on 2 distinct host(s)"
[ "$(grep -cF -- "$msg" "$T/err")" = 1 ] || { cat "$T/err"; fail "expected the message once: $msg"; }
[ "$(grep -c 'ERROR' "$T/err")" = 1 ] || { cat "$T/err"; fail "expected exactly one ERROR line"; }
grep -qF "[rank 0 " "$T/err" || { cat "$T/err"; fail "the message should come from rank 0"; }
[ ! -e "$T/few" ] || fail "strict mode on too few hosts prepared the job anyway"
! grep -q '^Worker ' "$T/out" || fail "a worker started"
pass "strict mode on too few hosts: exit 2 on every rank, one message, nothing prepared"

# ---- strict mode that cannot give every node a shard: 6 shards on 4 nodes (cap 2, 3*2 >= 6)
ranks_reset
# shellcheck disable=SC2086
run_expect 0 fake_mpirun $RANKS_NOABORT -np 4 -npernode 1 "$T/rank.sh" "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --num-shards 6 --process-cmd "$T/proc.sh {input} {output}" --job-dir "$T/six" --nodes 4 --require-all-nodes
ranks_expect 4 2
[ "$(grep -c 'ERROR' "$T/err")" = 1 ] || { cat "$T/err"; fail "expected exactly one ERROR line"; }
expect_err "strict mode cannot give every one of 4 nodes a shard with 6 shards (cap 2 per node)"
pass "strict mode with 6 shards on 4 nodes is refused on every rank"

# ---- strict mode survives a transient failure: the retry must not find every rank at its cap.
# (The cap counts the shards a rank completed, not its attempts; counted in attempts, the rank
# whose attempt failed used up its share and the retried shard waited forever.)
cat >"$T/once.sh" <<EOF2
#!/bin/sh
sleep 0.3
if [ -e "$T/failonce.\$3" ]; then rm -f "$T/failonce.\$3"; echo "transient failure" >&2; exit 3; fi
cp "\$1" "\$2"
EOF2
chmod +x "$T/once.sh"
touch "$T/failonce.part-00003-of-00008"
ranks_reset
run_expect 0 fake_mpirun -np 4 -npernode 1 "$T/rank.sh" "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
  --num-shards 8 --process-cmd "$T/once.sh {input} {output} {shard_id}" --job-dir "$T/transient" --nodes 4 --require-all-nodes
ranks_expect 4 0
[ ! -e "$T/failonce.part-00003-of-00008" ] || fail "the transient failure did not happen"
[ "$(find "$T/transient/attempts/part-00003-of-00008" -name attempt.json | wc -l)" = 2 ] || fail "expected 2 attempts of the failed shard"
[ "$(done_hosts "$T/transient" | tr '\n' ' ')" = "node1 node2 node3 node4 " ] || fail "done records name: $(done_hosts "$T/transient")"
cmp "$T/ref.jsonl" "$T/transient/merged.jsonl" || fail "output after a transient failure differs"
pass "strict mode with a transient failure: the retry is taken, every rank exits 0"

# ---- one node without the shared file system: its worker cannot start. Every rank stops at
# once with exit 2 (in strict mode the others could never finish without that node's share),
# the claims are released, and the same command completes the job once the node sees the files.
mkdir -p "$T/shared"
ranks_reset
start=$(date +%s)
# shellcheck disable=SC2086
run_expect 0 env FAKEHOSTS_HIDE="node4 $T/shared" timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS $RANKS_NOABORT \
  -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$T/shared/job" --nodes 4 --require-all-nodes
ranks_expect 4 2
# At once: the ranks' own span (ranks_span, without mpirun's start and end, which grow with
# the load); a wait for the lease (120 s) would be cut short by mpirun's timeout (100 s).
span=$(ranks_span)
python3 -c "import sys; sys.exit(0 if $span < 60 else 1)" || fail "stopping took $span s ($(($(date +%s) - start)) s in all)"
grep -qF "[rank 3 node4] ERROR: Job manifest not found: $T/shared/job/manifest.json" "$T/err" || { cat "$T/err"; fail "no message from node4"; }
expect_err "the job did not complete (exit code 2 on at least one rank)"
[ -z "$(running_locks "$T/shared/job")" ] || fail "running locks left: $(running_locks "$T/shared/job")"
ranks_reset
run_expect 0 fake_mpirun -np 4 -npernode 1 "$T/rank.sh" "$BIN" run "${COMMON[@]}" --job-dir "$T/shared/job" --nodes 4 --require-all-nodes
ranks_expect 4 0
cmp "$T/ref.jsonl" "$T/shared/job/merged.jsonl" || fail "output after the resumed run differs"
pass "a node without the shared files stops every rank at once with exit 2; the rerun completes"
