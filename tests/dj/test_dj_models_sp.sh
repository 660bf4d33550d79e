#!/usr/bin/env bash
# Model reuse across shards with a real Data-Juicer operator and a real model file, no download:
# words_num_filter with tokenization: true loads the SentencePiece model en.sp.model (trained
# here on the test's rows) from Data-Juicer's model cache (DATA_JUICER_MODELS_CACHE). An
# inotify watch counts how often the file is opened over an 8-shard job on 1 rank: at most once
# in the driver and once per Ray worker process with the reuse (16 times without: once in the
# driver and once in a worker per shard); the merged output is byte-identical to the run with
# ESHARD_DJ_REUSE_MODELS=0.
. "$(dirname "$0")/lib_dj.sh"

# sentencepiece is one of the venv's packages (scripts/setup-dj-env.sh installs it).
"$PY" -c 'import sentencepiece' 2>/dev/null || fail "sentencepiece is missing from the Data-Juicer venv (scripts/setup-dj-env.sh installs it)"
mkdir -p "$T/in" "$T/models"
python3 - "$T/in/rows.jsonl" "$T/corpus.txt" <<'PY'
import json, sys
words = ("model shard rank ray actor task data juicer filter token piece sentence load cache "
         "worker driver output merge order byte").split()
with open(sys.argv[1], "w") as f, open(sys.argv[2], "w") as c:
    for i in range(80):
        text = " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9))
        f.write(json.dumps({"id": i, "text": text}) + "\n")
        c.write(text + "\n")
PY
"$PY" - "$T/corpus.txt" "$T/models/en.sp" <<'PY' >"$T/train.log" 2>&1 || { cat "$T/train.log"; fail "cannot train the SentencePiece model"; }
import sys
import sentencepiece as spm
spm.SentencePieceTrainer.train(input=sys.argv[1], model_prefix=sys.argv[2], vocab_size=60,
                               model_type="unigram", hard_vocab_limit=False)
PY
[ -s "$T/models/en.sp.model" ] || fail "no en.sp.model was trained"
export DATA_JUICER_MODELS_CACHE=$T/models
cat >"$T/recipe.yaml" <<YAML
project_name: eshard-models-sp
executor_type: ray
ray_address: local
text_keys: text
np: 1
process:
  - words_num_filter:
      lang: en
      tokenization: true
      min_num: 7
      max_num: 1000
YAML
cd "$T"

# opens_during TAG CMD...: run CMD while an inotify watch counts the opens of en.sp.model.
opens_during() {
  local tag=$1; shift
  "$PY" - "$T/models" "$T/opens.$tag" <<'PY' &
import ctypes, os, signal, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
IN_OPEN = 0x20
assert fd >= 0 and libc.inotify_add_watch(fd, sys.argv[1].encode(), IN_OPEN) >= 0
n = 0
def done(*_):
    open(sys.argv[2], "w").write("%d\n" % n)
    os._exit(0)
signal.signal(signal.SIGTERM, done)
open(sys.argv[2] + ".ready", "w").close()
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        _wd, mask, _cookie, ln = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + ln].rstrip(b"\0")
        if mask & IN_OPEN and name == b"en.sp.model":
            n += 1
        i += 16 + ln
PY
  local watch=$!
  for _ in $(seq 100); do [ -e "$T/opens.$tag.ready" ] && break; sleep 0.1; done
  [ -e "$T/opens.$tag.ready" ] || fail "the inotify watch did not start"
  local rc=0
  run_expect 0 "$@" || rc=$?
  kill -TERM "$watch"; wait "$watch" || true
  [ "$rc" = 0 ] || fail "run $tag failed"
  echo "$tag: en.sp.model opened $(cat "$T/opens.$tag") times"
}

opens_during reuse "$MPIEXEC" -np 1 "$BIN" run --config recipe.yaml --dataset-path in \
  --job-dir "$T/job.reuse" --num-shards 8 --python "$PY" --dj-process "$DJ"
expect_out "PASS: 8 shards were completed"
opens_during plain env ESHARD_DJ_REUSE_MODELS=0 "$MPIEXEC" -np 1 "$BIN" run --config recipe.yaml \
  --dataset-path in --job-dir "$T/job.plain" --num-shards 8 --python "$PY" --dj-process "$DJ"
expect_out "PASS: 8 shards were completed"

cmp "$T/job.reuse/merged.jsonl" "$T/job.plain/merged.jsonl" || fail "the output differs with the reuse"
rows=$(wc -l <"$T/job.reuse/merged.jsonl")
[ "$rows" -gt 10 ] && [ "$rows" -lt 80 ] || fail "the filter kept $rows of 80 rows: not a real test"
reuse=$(cat "$T/opens.reuse") plain=$(cat "$T/opens.plain")
[ "$plain" -ge 16 ] || fail "without the reuse the model was opened only $plain times (16 expected)"
[ "$reuse" -ge 1 ] && [ "$reuse" -le 3 ] ||
  fail "with the reuse the model was opened $reuse times (once in the driver, once per worker: <= 3)"
pass "words_num_filter's SentencePiece model: $reuse opens with the reuse, $plain without; same $rows rows"
