#!/usr/bin/env bash
# prepare --bad-lines: strict (the default) stops at a blank or bad line and names the option;
# skip leaves such lines out, counts them per file in the manifest's bad_lines, keeps them out
# of the shards and the totals, and status, report and a re-prepare see it.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
mkdir -p "$T/in"
# x.jsonl: a bad record on line 3 and a trailing blank line (line 6); y.jsonl: clean.
printf '{"a":1}\n{"a":2}\n{"a":\n{"a":3}\n{"a":4}\n\n' >"$T/in/x.jsonl"
printf '{"b":1}\n{"b":2}\n' >"$T/in/y.jsonl"
CMD=(--config "$T/recipe.yaml" --dataset-path "$T/in" --num-shards 2 --process-cmd "cp {input} {output}")

# Strict: the first bad line stops prepare, and the message says what --bad-lines skip does.
run_expect 2 "$BIN" prepare "${CMD[@]}" --job-dir "$T/strict"
expect_err "Invalid JSON at $T/in/x.jsonl:3"
expect_err "--bad-lines skip leaves out blank and bad lines"
no_job_left "$T/strict"
printf '{"a":1}\n\n' >"$T/blank.jsonl"
run_expect 2 "$BIN" prepare "${CMD[@]}" --dataset-path "$T/blank.jsonl" --job-dir "$T/strict" --bad-lines strict
expect_err "Blank JSONL record at $T/blank.jsonl:2 (--bad-lines skip leaves out blank and bad lines"
run_expect 2 "$BIN" prepare "${CMD[@]}" --job-dir "$T/strict" --bad-lines lenient
expect_err "--bad-lines must be strict or skip, got 'lenient'"
no_job_left "$T/strict"
pass "strict: a bad record and a blank line stop prepare with a hint at --bad-lines skip"

# Skip: prepared from the 6 kept lines; the summary names the count, the files and the first.
J=$T/job
run_expect 0 "$BIN" prepare "${CMD[@]}" --job-dir "$J" --bad-lines skip
expect_out "Prepared 2 shards from 6 records"
expect_err "Skipped 2 bad line(s) in 1 file(s); first: $T/in/x.jsonl:3 (Invalid JSON: Expecting"
python3 - "$J" <<'PY' || fail "manifest bad_lines or totals wrong"
import json, os, sys
j = sys.argv[1]
m = json.load(open(os.path.join(j, "manifest.json")))
b = m["bad_lines"]
assert b["policy"] == "skip" and b["count"] == 2, b
assert b["files"] == [{"count": 2, "relative_path": "x.jsonl"}], b["files"]
assert [(f["relative_path"], f["line"]) for f in b["first"]] == [("x.jsonl", 3), ("x.jsonl", 6)], b["first"]
assert b["first"][0]["reason"].startswith("Invalid JSON: Expecting"), b["first"][0]
assert b["first"][1]["reason"] == "Blank JSONL record", b["first"][1]
assert m["total_rows"] == 6, m["total_rows"]
assert [f["rows"] for f in m["input_files"]] == [4, 2], m["input_files"]
rows = []
for s in m["shards"]:
    lines = open(os.path.join(j, s["path"]), "rb").read().splitlines()
    assert len(lines) == s["rows"], s
    rows += [json.loads(l) for l in lines]
assert sum(s["rows"] for s in m["shards"]) == m["total_rows"]
# The kept rows in input order, each with its global index among the kept rows.
want = [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}, {"b": 1}, {"b": 2}]
for i, w in enumerate(want):
    w["global_index"] = i
assert rows == want, rows
PY
pass "skip: the manifest counts and lists the bad lines; the shards and totals hold only the kept rows"

# The same request again is this job; the strict rule would not make the same job: refused.
run_expect 0 "$BIN" prepare "${CMD[@]}" --job-dir "$J" --bad-lines skip
expect_out "Job is already prepared and unchanged"
run_expect 2 "$BIN" prepare "${CMD[@]}" --job-dir "$J"
expect_err "was prepared with --bad-lines skip, which left out 2 line(s) (now strict)"
# A skip that left nothing out made the job strict makes: the same request.
run_expect 0 "$BIN" prepare "${CMD[@]}" --dataset-path "$T/in/y.jsonl" --job-dir "$T/clean" --bad-lines skip
run_expect 0 "$BIN" prepare "${CMD[@]}" --dataset-path "$T/in/y.jsonl" --job-dir "$T/clean"
expect_out "Job is already prepared and unchanged"
pass "re-prepare: strict over a job that skipped lines is refused naming the policy"

# run (mpirun -np 1) over the prepared job completes; status and the report show the count.
run_expect 0 timeout 60 mpirun -np 1 "$BIN" run "${CMD[@]}" --job-dir "$J" --bad-lines skip
[ "$(wc -l <"$J/merged.jsonl")" = 6 ] || fail "merged output is not the 6 kept rows"
run_expect 0 "$BIN" status --job-dir "$J"
expect_out "Bad lines: 2 input line(s) left out at prepare (--bad-lines skip"
run_expect 0 "$BIN" status --job-dir "$J" --json
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["bad_lines_skipped"] == 2' "$T/out" ||
  fail "status --json lacks bad_lines_skipped 2"
grep -qF "2 bad input line(s) were left out at prepare" "$J/report.html" || fail "report lacks the bad lines"
# A run that prepares with --bad-lines skip itself.
run_expect 0 timeout 60 mpirun -np 1 "$BIN" run "${CMD[@]}" --job-dir "$T/job2" --bad-lines skip
cmp -s "$T/job2/merged.jsonl" "$J/merged.jsonl" || fail "run --bad-lines skip made another output"
pass "run completes; status (text and --json) and the report show the skipped lines"
