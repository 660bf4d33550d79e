#!/usr/bin/env bash
# Model reuse across shards, ray_execution_mode task (tests/dj/lib_models.sh): over 8 shards the
# model loads at most once per Ray worker process (Data-Juicer's own get_model cache, keyed by
# the model's arguments in the runner), on 1 and on 2 ranks; an operator that raises in one
# shard fails only that attempt and the next shards' output is right.
. "$(dirname "$0")/lib_models.sh"

models_run t1 task 1
models_check t1 2
pass "task mode, 1 rank: one load per worker process"

touch "$T/flag.raise"
models_run t2 task 2 "$T/flag.raise" raise
models_check t2 4
[ ! -e "$T/flag.raise" ] || fail "the operator never raised"
grep -rl 'eshard_test_model_mapper: raising as asked' "$T/job.t2/attempts" >/dev/null ||
  fail "no attempt log shows the operator's error"
pass "task mode, 2 ranks, a failing shard: one load per worker process, right output"
