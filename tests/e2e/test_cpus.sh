#!/bin/bash
# The CPUs a rank's work gets (README "CPUs, GPUs and binding"): under mpirun's default binding
# (one core per rank when np <= 2) every processor a rank starts still runs on every CPU of its
# node when the rank is alone on its host (fake hosts), on an even half when two ranks share a
# host, and rank 0 warns once for the job; an unbound launch warns nothing; a worker bound by
# taskset gets its node back; and the node is the cgroup cpuset the job may use, not every CPU
# of the machine.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ranks.sh"
. "$(dirname "$0")/fakehosts.sh"
fakehosts_check
fakehosts_setup 2
ranks_setup
# lib.sh turns mpirun's binding off for the other tests; this one needs the default.
unset OMPI_MCA_hwloc_base_binding_policy
[ "$MPI_FLAVOR" = openmpi ] || fail "this test checks Open MPI's default binding; $MPIRUN is $MPI_FLAVOR's"

node=$(python3 -c 'import os; os.sched_setaffinity(0, range(4096)); c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1], len(c))')
read -r first last count <<<"$node"
[ "$count" -ge 2 ] || fail "this test needs a machine with at least 2 CPUs (the node has $count)"
[ "$((last - first + 1))" = "$count" ] || fail "this test expects contiguous CPUs, got $node"
all="$first-$last"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(160):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
# The processor records its own CPU list and host, and takes a while, so that every rank of a
# run gets shards.
cat >"$T/proc.sh" <<EOF
#!/bin/sh
echo "\$(hostname) \$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" >>"$T/cpus.log"
sleep 0.3
cp "\$1" "\$2"
EOF
chmod +x "$T/proc.sh"
COMMON=(--config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --num-shards 8 --process-cmd "$T/proc.sh {input} {output}")
# shellcheck disable=SC2086
fake_mpirun() { timeout 100 "$MPIRUN" $FAKEHOSTS_MPIRUN_ARGS "$@"; }
warning_lines() { grep -c 'WARNING: the launcher bound' "$T/err" || true; }

# ---- the precondition: mpirun's default binding gives each rank of np 2 one CPU.
bound=$(fake_mpirun -np 2 -npernode 1 sh -c "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status" | sort -u)
[ "$bound" != "$all" ] || fail "mpirun -np 2 did not bind its ranks (each got $bound): the test would prove nothing"

# ---- one rank per host: every processor has the whole node; one warning, by rank 0.
: >"$T/cpus.log"
run_expect 0 fake_mpirun -np 2 -npernode 1 "$BIN" run "${COMMON[@]}" --job-dir "$T/hosts"
expect_out "PASS: 8 shards were completed by 2 node(s)"
[ "$(cut -d' ' -f1 "$T/cpus.log" | sort -u | tr '\n' ' ')" = "node1 node2 " ] || fail "shards ran on: $(cat "$T/cpus.log")"
[ "$(cut -d' ' -f2 "$T/cpus.log" | sort -u)" = "$all" ] || fail "processors ran on CPUs $(cut -d' ' -f2 "$T/cpus.log" | sort -u | tr '\n' ' '), not the node's $all"
[ "$(warning_lines)" = 1 ] || { cat "$T/err"; fail "expected one binding warning for the job"; }
expect_err "[rank 0 node1] WARNING: the launcher bound 2 of 2 rank(s) to fewer CPUs than their share of their node"
pass "one rank per host: processors on CPUs $all, one warning"

# ---- two ranks on one host, unbound (mpirun's default binding would already give them the
# halves here): each rank's processors have one half, both halves are used, and no warning.
: >"$T/cpus.log"
half=$((count / 2))
h0="$first-$((first + half - 1))"; h1="$((first + half))-$last"
[ "$half" = 1 ] && h0=$first
[ "$((count - half))" = 1 ] && h1=$last
run_expect 0 timeout 100 "$MPIRUN" --bind-to none -np 2 "$BIN" run "${COMMON[@]}" --job-dir "$T/shared"
[ "$(cut -d' ' -f2 "$T/cpus.log" | sort -u | tr '\n' ' ')" = "$(printf '%s\n%s\n' "$h0" "$h1" | sort -u | tr '\n' ' ')" ] ||
  fail "two ranks of one host: processors ran on $(cut -d' ' -f2 "$T/cpus.log" | sort -u | tr '\n' ' '), want the halves $h0 and $h1"
[ "$(warning_lines)" = 0 ] || { cat "$T/err"; fail "a warning for ranks bound no narrower than their share"; }
pass "two ranks on one host: halves $h0 and $h1"

# ---- an unbound launch (what the README's command lines use): the node, no warning.
: >"$T/cpus.log"
run_expect 0 timeout 100 "$MPIRUN" --bind-to none -np 1 "$BIN" run "${COMMON[@]}" --job-dir "$T/unbound"
[ "$(cut -d' ' -f2 "$T/cpus.log" | sort -u)" = "$all" ] || fail "--bind-to none: processors ran on $(sort -u "$T/cpus.log")"
[ "$(warning_lines)" = 0 ] || { cat "$T/err"; fail "a warning for an unbound rank"; }

# ---- a worker bound by taskset (as srun's task/affinity binds a task): the node, one warning.
: >"$T/cpus.log"
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/worker"
run_expect 0 taskset -c "$first" "$BIN" worker --job-dir "$T/worker"
[ "$(cut -d' ' -f2 "$T/cpus.log" | sort -u)" = "$all" ] || fail "a bound worker's processors ran on $(sort -u "$T/cpus.log")"
expect_err "WARNING: this worker was bound to CPU(s) $first, fewer than its node's $all"
pass "a worker bound by taskset: processors on $all"

# ---- the node is the cgroup cpuset, not the machine: a job confined to the last CPU by its
# cgroup (as Slurm's task/cgroup or a container confines one) stays there.
cg=""
if [ -w /sys/fs/cgroup/cpuset ]; then
  cg=/sys/fs/cgroup/cpuset/eshard-test-$$
  mkdir "$cg"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"$cg/cpuset.mems"
  echo "$last" >"$cg/cpuset.cpus"
elif [ -f /sys/fs/cgroup/cgroup.subtree_control ]; then
  cg=/sys/fs/cgroup/eshard-test-$$
  grep -qw cpuset /sys/fs/cgroup/cgroup.subtree_control || echo +cpuset >/sys/fs/cgroup/cgroup.subtree_control
  mkdir "$cg"
  echo "$last" >"$cg/cpuset.cpus"
else
  fail "no writable cpuset cgroup (v1 /sys/fs/cgroup/cpuset or v2 /sys/fs/cgroup) to confine the job"
fi
trap 'rmdir "$cg" 2>/dev/null; test_done' EXIT
: >"$T/cpus.log"
run_expect 0 "$BIN" prepare "${COMMON[@]}" --job-dir "$T/cpuset"
run_expect 0 sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" worker --job-dir "$3"' sh "$cg" "$BIN" "$T/cpuset"
[ "$(cut -d' ' -f2 "$T/cpus.log" | sort -u)" = "$last" ] || fail "a worker in a cpuset of CPU $last: processors ran on $(sort -u "$T/cpus.log")"
pass "a cpuset of CPU $last: processors on $last"
