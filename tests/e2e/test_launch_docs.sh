#!/bin/bash
# The launchers and their docs lead a new user to a job that runs:
#   - scripts/slurm-eshard.sbatch checks that srun has Slurm's PMIx plugin (srun --mpi=list)
#     before it starts anything: without it, exit 2 naming the plugins and ESHARD_LAUNCHER=mpirun,
#     srun never started; with it, srun --mpi=pmix starts one task a node, unbound, with every
#     argument (a fake srun on PATH plays Slurm; tests/e2e/test_slurm.sh runs a real one);
#   - README.md and README_ZH.md: the first screen (the first 40 lines) gives a start with one's
#     own recipe and data, the PAI-DLC MPIJob section says what the image holds, how to submit,
#     which storage works and why, and passes --python and --dj-process; the Slurm section says
#     how to check PMIx and what to do about --cpus-per-task.
. "$(dirname "$0")/lib.sh"
SB=$SRC/scripts/slurm-eshard.sbatch

mkdir "$T/bin"
cat >"$T/bin/srun" <<'SH'
#!/bin/sh
if [ "$1" = --mpi=list ]; then
  printf 'MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n%s' "$FAKE_PMIX"
  exit 0
fi
echo "srun $*" >>"$FAKE_LOG"
SH
chmod +x "$T/bin/srun"
export FAKE_LOG=$T/srun.log SLURM_JOB_NUM_NODES=3 ESHARD_BIN=/bin/true
FAKE_PMIX="" run_expect 2 env PATH="$T/bin:$PATH" bash "$SB" --config r.yaml --job-dir /shared/j1
expect_err "no PMIx plugin"
expect_err "pmi2"
expect_err "ESHARD_LAUNCHER=mpirun"
[ ! -e "$FAKE_LOG" ] || fail "srun started tasks without PMIx: $(cat "$FAKE_LOG")"
pass "no PMIx in srun --mpi=list: exit 2 before anything starts"
FAKE_PMIX=$'\tpmix\nspecific pmix plugin versions available: pmix_v4\n' run_expect 0 env PATH="$T/bin:$PATH" bash "$SB" --config r.yaml --job-dir /shared/j1
grep -qx "srun --mpi=pmix --nodes=3 --ntasks=3 --ntasks-per-node=1 --cpu-bind=none /bin/true run --config r.yaml --job-dir /shared/j1" "$FAKE_LOG" ||
  fail "srun ran otherwise: $(cat "$FAKE_LOG")"
pass "PMIx listed: srun --mpi=pmix, one unbound task a node, every argument"

python3 - "$SRC/README.md" "$SRC/README_ZH.md" <<'PY' || fail "the launch docs lack what a new user needs (see above)"
import re, sys
problems = []
for path in sys.argv[1:]:
    t = open(path, encoding="utf-8").read()
    first = "\n".join(t.split("\n")[:40])
    if not re.search(r"eshard-mpi run --config my-recipe\.yaml --dataset-path my-data/", first):
        problems.append("%s: the first screen has no start with one's own recipe and data" % path)
    def section(title):
        m = re.search(r"^### %s\n(.*?)(?=^##)" % re.escape(title), t, flags=re.M | re.S)
        return m.group(1) if m else ""
    dlc, slurm = section("PAI-DLC MPIJob"), section("Slurm")
    for word in ("Open MPI", "Data-Juicer", "Ray", "setup-dj-env.sh", "install-deps.sh --runtime",
                 "/etc/mpi/hostfile", "dlc-mpijob.sh", "NAS", "CPFS", "O_EXCL", "rename", "flock", "ossfs",
                 "--python", "--dj-process", "lacks hard links", "MPIJob"):
        if word not in dlc:
            problems.append("%s: the PAI-DLC MPIJob section lacks %s" % (path, word))
    for word in ("srun --mpi=list", "pmix", "--cpus-per-task", "--exclusive", "--cpu-bind=none",
                 "--python", "--dj-process", "ESHARD_LAUNCHER=mpirun"):
        if word not in slurm:
            problems.append("%s: the Slurm section lacks %s" % (path, word))
if problems:
    print("\n".join(problems))
    sys.exit(1)
PY
pass "the first screen, the PAI-DLC MPIJob and Slurm sections"
echo "PASS test_launch_docs"
