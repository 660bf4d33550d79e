#!/usr/bin/env bash
# prepare asks Data-Juicer's registry (the helper, a Python start) on a thread while pass 1 reads
# the input. Whatever the registry says must count as if it had been asked first: its refusal
# is the one error (also when the input is bad too, or the job folder exists), nothing is left
# behind, and its answer (not the naming convention's) is what the manifest records.
# The "python" here is /bin/sh running a fake helper that answers after a delay.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
mkdir -p "$T/in" "$T/bad"
python3 - "$T/in/x.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(200000):
        f.write(json.dumps({"id": i, "text": "word " * 20}) + "\n")
PY
printf '{"a":1}\n{"a":\n' >"$T/bad/x.jsonl"

# helper NAME DELAY GLOBAL: answers for every operator name it is asked about after DELAY
# seconds: known, a mapper, and whole-dataset when GLOBAL is true.
helper() {
  cat >"$T/$1.sh" <<EOF
sleep $2
[ "\$1" = --version ] && { echo '{"data_juicer_version": "9.9.9-fake", "commit": null}'; exit 0; }
ops=""
for a in "\$@"; do
  case "\$a" in --) continue ;; esac
  ops="\$ops\${ops:+, }\"\$a\": {\"known\": true, \"mapper\": true, \"filter\": false, \"global\": $3}"
done
echo "{\"data_juicer_version\": \"9.9.9-fake\", \"ops\": {\$ops}}"
EOF
}
helper refuse 0.5 true
helper accept 0.5 false
helper refuse_now 0 true

# prep HELPER DATASET JOB: prepare with that helper as the registry.
prep() {
  ESHARD_DJ_HELPER=$T/$1.sh run_expect "$4" "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$2" \
    --job-dir "$3" --num-shards 4 --python /bin/sh
}
refusal="Operator 'whitespace_normalization_mapper' requires or may require whole-dataset semantics"
one_error() {
  [ "$(grep -c ERROR "$T/err")" = 1 ] || { cat "$T/err"; fail "$1: not exactly one ERROR line"; }
}

# 1. The registry refuses while pass 1 runs: its error, exit 2, no job or stage folder.
prep refuse "$T/in" "$T/j1" 2
expect_err "$refusal"
one_error refuse
no_job_left "$T/j1"
pass "a refusal during pass 1 is the one error, nothing left"

# 2. A bad input and a refusing registry: the recipe's error comes first, as if asked first;
#    with a registry that accepts, the input's error is said once.
prep refuse "$T/bad" "$T/j2" 2
expect_err "$refusal"
one_error bad+refuse
no_job_left "$T/j2"
prep accept "$T/bad" "$T/j2" 2
expect_err "Invalid JSON at $T/bad/x.jsonl:2"
one_error bad+accept
no_job_left "$T/j2"
pass "the recipe's error before the input's; the input's error said once"

# 3. The registry accepts: the job is prepared and the manifest has the registry's identity.
prep accept "$T/in" "$T/j3" 0
expect_out "Prepared 4 shards from 200000 records"
[ "$(json_get "$T/j3/manifest.json" '["data_juicer"]["commit"]')" = 9.9.9-fake ] \
  || { python3 -m json.tool "$T/j3/manifest.json" | head -40; fail "the manifest lacks the registry's version"; }
! grep -q "registry was not consulted" "$T/err" || { cat "$T/err"; fail "warned that the registry was not consulted"; }
pass "an accepting registry: prepared, its version recorded"

# 4. The job folder exists: a refusal now is an error, never "already prepared".
prep refuse_now "$T/in" "$T/j3" 2
expect_err "$refusal"
one_error existing
! grep -q "already prepared" "$T/out" || fail "said already prepared for a refused recipe"
pass "an existing job with a refused recipe is refused"

# 5. A name the convention does not know but the registry does (a custom operator): the quick
#    load fails, the registry decides, the job is prepared.
printf 'process:\n  - my_custom_op:\n' >"$T/custom.yaml"
ESHARD_DJ_HELPER=$T/accept.sh run_expect 0 "$BIN" prepare --config "$T/custom.yaml" --dataset-path "$T/in" \
  --job-dir "$T/j5" --num-shards 2 --python /bin/sh
expect_out "Prepared 2 shards"
pass "a registry-only operator is accepted"
