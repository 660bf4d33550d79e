#!/usr/bin/env bash
# Non-regular files in a job folder (issue 35, item 2): a FIFO (or a socket, or a folder) where
# a file is expected never hangs status, merge, report, verify, worker or retry. Each command
# runs under `timeout` against a copy of a done, failed or pending job with one entry replaced:
# state/events/x.jsonl, a done record, manifest.json, a shard, an attempt's output, its
# attempt.json, a failed attempt's process.log, a lock. It must finish with the code the table
# says, and where the entry makes it fail, one message naming the entry and what it is.
. "$(dirname "$0")/lib.sh"

write_recipe "$T/recipe.yaml"
python3 - "$T/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "text": "row %d" % i}) + "\n")
PY
S0=part-00000-of-00002
# base STATE CMD: a 2-shard job at $T/base-STATE whose processor is CMD, worked once unless pending.
base() {
  run_expect 0 "$BIN" prepare --config "$T/recipe.yaml" --dataset-path "$T/in.jsonl" --job-dir "$T/base-$1" \
    --num-shards 2 --process-cmd "$2 {input} {output}"
  case $1 in
    done) run_expect 0 "$BIN" worker --job-dir "$T/base-$1" ;;
    failed) run_expect 2 "$BIN" worker --job-dir "$T/base-$1" ;;
  esac
}
base done cp
base failed false
base pending cp

# entry JOB PLACE: the path of PLACE in JOB.
entry() {
  local a
  a=$(find "$1/attempts/$S0" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort | head -1)
  case $2 in
    events) echo "$1/state/events/x.jsonl" ;;
    record) echo "$1/state/done/$S0.json" ;;
    manifest) echo "$1/manifest.json" ;;
    shard) echo "$1/shards/$S0.jsonl" ;;
    output) echo "$a/processed.jsonl" ;;
    attempt) echo "$a/attempt.json" ;;
    log) echo "$a/process.log" ;;
    lock) echo "$1/state/locks/$S0.lock" ;;
  esac
}
# replace PATH KIND: PATH becomes a FIFO, a listening UNIX socket or an empty folder.
replace() {
  rm -f "$1"
  case $2 in
    fifo) mkfifo "$1" ;;
    socket) python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$1" ;;
    folder) mkdir "$1" ;;
  esac
}

n=0
# bad_entry STATE PLACE KIND CMD CODE [TEXT]: on a copy of base-STATE with PLACE replaced by KIND,
# CMD exits CODE within 20 s; with TEXT, its stdout or stderr names the entry and holds TEXT.
bad_entry() {
  local state=$1 place=$2 kind=$3 cmd=$4 want=$5 text=${6:-} J p got=0
  n=$((n + 1))
  J=$T/j$n
  cp -a "$T/base-$state" "$J"
  p=$(entry "$J" "$place")
  replace "$p" "$kind"
  local args=(--job-dir "$J")
  case $cmd in
    merge|verify) args+=(--output "$T/out$n.jsonl") ;;
    report) args+=(--output "$T/out$n.html") ;;
    retry) args+=(--all-failed) ;;
  esac
  timeout 20 "$BIN" "$cmd" "${args[@]}" >"$T/out" 2>"$T/err" </dev/null || got=$?
  [ "$got" != 124 ] || fail "$cmd hangs on a $kind at $p ($state job)"
  if [ "$got" != "$want" ]; then
    cat "$T/out" "$T/err"
    fail "$cmd with a $kind at $p ($state job): exit $got, not $want"
  fi
  if [ -n "$text" ]; then
    grep -qF -- "$p is $text" "$T/out" "$T/err" || { cat "$T/out" "$T/err"; fail "$cmd with a $kind at $p: no '$p is $text'"; }
  fi
  if [ "$got" = 0 ] && [ "$cmd" = report ]; then
    [ -s "$T/out$n.html" ] || fail "report with a $kind at $p: no page"
  fi
  rm -rf "$J"
}

# An event log that is not a regular file is a bad event file (as one that cannot be read),
# never a reason to fail; the report says how many could not be read.
for cmd in status merge verify report; do bad_entry done events fifo "$cmd" 0; done
grep -q "could not be read" "$T/out$n.html" || fail "the report does not say an event file could not be read"
bad_entry done events socket status 0
bad_entry pending events fifo worker 0
pass "a FIFO or socket in state/events: status, merge, report, verify and worker finish (0)"

# A done record: bad (as one that is not JSON), the job not complete for status, merge, verify.
bad_entry done record fifo status 2 "a FIFO, not a regular file"
bad_entry done record fifo merge 2 "a FIFO, not a regular file"
bad_entry done record fifo verify 2 "a FIFO, not a regular file"
bad_entry done record fifo report 0
bad_entry done record fifo worker 0
bad_entry done record socket merge 2 "not a regular file"
bad_entry done record folder merge 2 "a folder, not a regular file"
pass "a FIFO, socket or folder for a done record: status, merge, verify exit 2 naming it; report, worker finish"

# The manifest: no command gets further than reading it.
for cmd in status merge report verify worker retry; do
  bad_entry done manifest fifo "$cmd" 2 "a FIFO, not a regular file"
done
pass "a FIFO for manifest.json: every command exits 2 naming it"

# An attempt's output, its attempt.json, a failed attempt's log, a lock, a shard.
bad_entry done output fifo merge 2 "a FIFO, not a regular file"
bad_entry done output fifo verify 2
bad_entry done output fifo status 2
bad_entry done output fifo report 0
for cmd in status report verify; do bad_entry done attempt fifo "$cmd" 0; done
bad_entry failed log fifo status 2
bad_entry failed log fifo report 0
bad_entry pending lock fifo status 2 "a FIFO, not a regular file"
bad_entry pending lock fifo worker 2 "a FIFO, not a regular file"
bad_entry failed lock fifo retry 2 "a FIFO, not a regular file"
bad_entry pending shard fifo worker 2
pass "a FIFO for an output, attempt.json, process.log, lock or shard: each command finishes with its code ($n cases)"
