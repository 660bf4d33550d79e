#!/usr/bin/env bash
# Where the commands write (issue 35, items 1 and 6):
# 1. report, merge, verify and run --output never replace what the job needs: an output inside
#    the job folder (after ".." and links, also a link outside pointing in) is refused with
#    exit 2 and one line naming it, the job is left as it was (status and merge still work),
#    and run refuses before it prepares anything. Each command's own file there works:
#    <job>/report.html for report, <job>/merged.jsonl (the default) for merge, verify and run.
# 2. report --output /dev/stdout (a pipe or a file behind it), a character device and a FIFO are
#    written directly; the summary line then goes to stderr, not into the page.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(30):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
S0=part-00000-of-00002
J=$T/job
run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" \
  --num-shards 2 --process-cmd "cp {input} {output}"
run_expect 0 "$BIN" worker --job-dir "$J"
ln -s "$J" "$T/alias"
ln -s "$J/state/done/$S0.json" "$T/evil.html"
lock=$J/state/locks/$S0.lock
snapshot() { (cd "$J" && find . -printf '%p %y %s\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(snapshot)

# refused CMD OUTPUT [ARGS...]: exit 2, one line naming OUTPUT, the job folder unchanged.
refused() {
  local cmd=$1 out=$2; shift 2
  run_expect 2 "$BIN" "$cmd" --job-dir "$J" --output "$out" "$@"
  expect_err "Output $out"
  expect_err "is inside the job folder $J"
  [ "$(grep -c . "$T/err")" = 1 ] || { cat "$T/err"; fail "$cmd --output $out: more than one line on stderr"; }
  [ "$before" = "$(snapshot)" ] || fail "$cmd --output $out changed the job folder"
}
for out in "$J/manifest.json" "$J/state/done/$S0.json" "$J/state/../recipe.yaml" "$T/alias/shards/$S0.jsonl" \
  "$T/evil.html" "$lock" "$J/merged.jsonl" "$J/state/new.html" "$J"; do
  refused report "$out"
done
run_expect 0 "$BIN" status --job-dir "$J"
pass "report --output: the manifest, a record, a shard, a lock, another file or folder of the job (by .., a link) refused"

for out in "$J/manifest.json" "$T/alias/state/done/$S0.json" "$J/report.html" "$J/merge.json" "$J/attempts/x.jsonl"; do
  refused merge "$out" --overwrite
  refused verify "$out"
  [ ! -s "$T/out" ] || { cat "$T/out"; fail "verify --output $out printed before refusing"; }
done
pass "merge and verify --output inside the job folder refused (also with --overwrite), nothing printed"

# run: refused before it prepares anything, on a new job folder and on this one.
R=$T/runjob
run_expect 2 timeout 60 mpirun -np 1 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$R" \
  --num-shards 2 --process-cmd "cp {input} {output}" --output "$R/shards/x.jsonl"
expect_err "Output $R/shards/x.jsonl is inside the job folder $R"
no_job_left "$R"
run_expect 2 timeout 60 mpirun -np 1 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$J" \
  --num-shards 2 --process-cmd "cp {input} {output}" --output "$J/manifest.json"
expect_err "Output $J/manifest.json is inside the job folder $J"
[ "$before" = "$(snapshot)" ] || fail "run --output $J/manifest.json changed the job folder"
pass "run --output inside the job folder: exit 2 before anything is prepared"

# Each command's own file in the job folder works, by any name.
run_expect 0 "$BIN" report --job-dir "$J" --output "$T/alias/report.html"
grep -q '</html>' "$J/report.html" || fail "report --output <job>/report.html wrote no page"
run_expect 0 "$BIN" merge --job-dir "$J" --output "$J/state/../merged.jsonl"
expect_out "into $J/merged.jsonl"
run_expect 0 "$BIN" verify --job-dir "$J" --output "$T/alias/merged.jsonl"
run_expect 0 "$BIN" verify --job-dir "$J"
expect_out "PASS: 2 shards"
cp "$J/merged.jsonl" "$T/ref.jsonl"
run_expect 0 timeout 60 mpirun -np 1 "$BIN" run --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$R" \
  --num-shards 2 --process-cmd "cp {input} {output}" --output "$R/merged.jsonl"
cmp -s "$R/merged.jsonl" "$T/ref.jsonl" || fail "run --output <job>/merged.jsonl: a different output"
[ -s "$R/report.html" ] || fail "run wrote no report.html"
pass "report --output <job>/report.html, merge, verify and run --output <job>/merged.jsonl (the defaults) work"

# report --output /dev/stdout: into a pipe, into a file; a character device; a FIFO. Named as
# /dev/fd/N (what /dev/stdout leads to, /proc/self/fd/N): code that wrongly writes a temporary
# beside it fails in /proc, where beside /dev/stdout (as root) it would replace /dev/stdout.
code=0
"$BIN" report --job-dir "$J" --output /dev/fd/1 2>"$T/err" | cat >"$T/piped.html" || code=$?
[ "$code" = 0 ] || { cat "$T/err"; fail "report --output /dev/fd/1 | cat: exit $code"; }
head -c 15 "$T/piped.html" | grep -q '<!DOCTYPE html>' || fail "report to a pipe: no page on stdout"
[ "$(tail -n 1 "$T/piped.html")" = "</html>" ] || fail "report to a pipe: the page does not end with </html> (summary line in it?)"
expect_err "Wrote /dev/fd/1: 2 attempts of 2 shards"
run_expect 0 "$BIN" report --job-dir "$J" --output /dev/fd/1
[ "$(tail -n 1 "$T/out")" = "</html>" ] || fail "report --output /dev/fd/1 > file: the page does not end with </html>"
exec 7>/dev/null
run_expect 0 "$BIN" report --job-dir "$J" --output /dev/fd/7
exec 7>&-
expect_out "Wrote /dev/fd/7"
mkfifo "$T/fifo"
cat "$T/fifo" >"$T/from-fifo.html" & reader=$!
run_expect 0 timeout 20 "$BIN" report --job-dir "$J" --output "$T/fifo"
wait "$reader"
head -c 15 "$T/from-fifo.html" | grep -q '<!DOCTYPE html>' && [ "$(tail -n 1 "$T/from-fifo.html")" = "</html>" ] ||
  fail "report into a FIFO: not the whole page"
[ -p "$T/fifo" ] || fail "report replaced the FIFO"
pass "report --output /dev/fd/1 (a pipe, a file), a character device and a FIFO: written directly, the summary on stderr"
