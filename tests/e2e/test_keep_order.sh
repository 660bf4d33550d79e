#!/bin/bash
# Order-stable output (--keep-order; the default for Data-Juicer): each attempt reads a copy of
# its shard with a hidden row number "__eshard_row__" (the shards in shards/ are untouched), and
# materialization removes the field and lists the surviving rows in input order. A processor
# that shuffles and filters its rows at random then gives a merged file that is byte-identical
# across runs, across -np 1/2/4 and across shard counts. A processor that drops, changes or
# duplicates the field fails with a clear message; an input row that has the field of its own is
# refused; without --keep-order a command processor's own order is kept.
. "$(dirname "$0")/lib.sh"
unset PAI_JOB_ID DLC_JOB_ID JOB_ID SLURM_JOB_ID
write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(200):
        f.write(json.dumps({"id": i, "text": "row %d \u00e9t\u00e9" % i + "x" * (i * 37 % 53), "n": {"k": i}},
                           ensure_ascii=(i % 2 == 0)) + "\n")
PY
# Shuffles its rows at random, drops every row whose id is a multiple of 5 (a row-wise filter),
# re-encodes each row with other key order and spacing, and, when asked, breaks the field.
cat >"$T/proc.py" <<'PY'
import json, os, random, sys
src, dst, how = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(src, encoding="utf-8")]
random.shuffle(rows)
with open(dst, "w", encoding="utf-8") as f:
    kept = 0
    for r in rows:
        if r["id"] % 5 == 0:
            continue
        kept += 1
        # The second row written (counted among the kept ones: a filtered row at that place
        # left the field in every row, 1 run in 5, and the shard passed).
        if how == "drop" and kept == 2:
            del r["__eshard_row__"]
        if how == "rename" and "__eshard_row__" in r:
            r["row"] = r.pop("__eshard_row__")
        if how == "dup":
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.write(json.dumps(dict(reversed(list(r.items()))), ensure_ascii=False) + "\n")
PY
proc() { echo "python3 $T/proc.py {input} {output} $1"; }
job() { # NAME SHARDS NP [PROC_MODE]
  local name=$1 n=$2 np=$3 how=${4:-ok}
  run_expect 0 "$MPIEXEC" --oversubscribe -np "$np" "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" \
    --job-dir "$T/$name" --num-shards "$n" --process-cmd "$(proc "$how")" --keep-order
}
job a 7 1
# What the merged file must be: the rows of the shards (as prepare encoded them, with their
# index key) without the filtered ones, each as the processor re-encodes it.
python3 - "$T/a" "$T/want.jsonl" <<'PY'
import json, os, sys
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for s in m["shards"]:
        for l in open(os.path.join(job, s["path"]), encoding="utf-8"):
            r = json.loads(l)
            if r["id"] % 5:
                f.write(json.dumps(dict(reversed(list(r.items()))), ensure_ascii=False) + "\n")
PY
cmp "$T/a/merged.jsonl" "$T/want.jsonl" || fail "merged output is not in input order"
[ "$(json_get "$T/a/manifest.json" '["processor"]["keep_order"]')" = True ] || fail "manifest lacks keep_order"
python3 - "$T/a" <<'PY'
import glob, json, os, sys
job = sys.argv[1]
m = json.load(open(os.path.join(job, "manifest.json")))
for s in m["shards"]:
    raw = open(os.path.join(job, s["path"]), "rb").read()
    assert b"__eshard_row__" not in raw, s["id"]  # the shards stay as prepare wrote them
    d = json.load(open(os.path.join(job, "state/done", s["id"] + ".json")))
    adir = os.path.join(job, os.path.dirname(d["output_path"]))
    a = json.load(open(os.path.join(adir, "attempt.json")))
    assert a["command"][2] == adir + "/input.jsonl", a["command"]
    assert not os.path.exists(adir + "/input.jsonl"), "the numbered copy was left behind"
    assert b"__eshard_row__" not in open(os.path.join(job, d["output_path"]), "rb").read()
print("shards untouched, numbered copies removed, no hidden field in any output")
PY
pass "shuffled and filtered output comes back in input order"

for spec in "b 7 2" "c 7 4" "d 3 2" "e 16 4" "f 1 1"; do
  set -- $spec
  job "$1" "$2" "$3"
  cmp "$T/a/merged.jsonl" "$T/$1/merged.jsonl" || fail "merged output of $2 shards at -np $3 differs"
done
pass "byte-identical across runs, -np 1/2/4 and 1/3/7/16 shards"

# The field dropped, renamed or duplicated: the attempt fails and says why (no retries here).
for how in drop rename dup; do
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/bad-$how" \
    --num-shards 2 --process-cmd "$(proc "$how")" --keep-order --max-retries 0
  run_expect 2 "$BIN" worker --job-dir "$T/bad-$how"
  err=$(json_get "$T/bad-$how/state/failed/part-00000-of-00002.json" '["last_error"]')
  case $how in
    drop|rename) want='has no "__eshard_row__" field (the hidden row number of order-stable output): the recipe or processor dropped or renamed it' ;;
    dup) want='twice: the processor duplicated a row' ;;
  esac
  case $err in *"$want"*) ;; *) fail "$how: unexpected error: $err" ;; esac
done
pass "a dropped, renamed or duplicated row number fails clearly"

# An input row with the field of its own.
{ cat "$T/in.jsonl"; echo '{"id": 999, "__eshard_row__": 3}'; } >"$T/in2.jsonl"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in2.jsonl" --job-dir "$T/own" \
  --num-shards 1 --process-cmd "$(proc ok)" --keep-order --max-retries 0
run_expect 2 "$BIN" worker --job-dir "$T/own"
err=$(json_get "$T/own/state/failed/part-00000-of-00001.json" '["last_error"]')
case $err in *'Input row has a field "__eshard_row__" of its own'*':201') ;; *) fail "own field: $err" ;; esac
pass "an input row with the field is refused"

# Options: both at once is a usage error; a command processor keeps its own order by default;
# Data-Juicer keeps input order by default.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/x" --num-shards 1 \
  --keep-order --no-keep-order
expect_err "give at most one of --keep-order and --no-keep-order"
[ ! -e "$T/x" ] || fail "a refused prepare left a job folder"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/cmd" --num-shards 2 \
  --process-cmd "cp {input} {output}"
[ "$(json_get "$T/cmd/manifest.json" '["processor"]["keep_order"]')" = False ] || fail "keep_order on for a command"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/dj" --num-shards 2
[ "$(json_get "$T/dj/manifest.json" '["processor"]["keep_order"]')" = True ] || fail "keep_order off for Data-Juicer"
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/dj2" --num-shards 2 --no-keep-order
[ "$(json_get "$T/dj2/manifest.json" '["processor"]["keep_order"]')" = False ] || fail "--no-keep-order ignored"
# The same request with another keep-order choice is another job.
run_expect 2 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/dj2" --num-shards 2
pass "defaults: on for Data-Juicer, off for --process-cmd"
