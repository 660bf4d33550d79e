#!/usr/bin/env bash
# Model reuse across shards, ray_execution_mode actor (tests/dj/lib_models.sh): the rank's
# runner keeps the operator's actors across its 8 shards, so the model loads once per actor
# slot per rank (num_proc 1: once per rank), on 1 and on 2 ranks; an actor that crashes in a
# shard is replaced (one more load, by a new process) and the output stays right.
. "$(dirname "$0")/lib_models.sh"

models_run a1 actor 1
models_check a1 1
pass "actor mode, 1 rank: one load for 8 shards"

touch "$T/flag.crash"
models_run a2 actor 2 "$T/flag.crash" crash
[ ! -e "$T/flag.crash" ] || fail "the operator never crashed"
models_check a2 3
pass "actor mode, 2 ranks, a crashed actor: replaced, one load per actor process, right output"
