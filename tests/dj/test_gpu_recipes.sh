#!/usr/bin/env bash
# The bundled GPU recipes (docs/design.md#reference-tests 4 and 5), without a GPU: the structure of
# configs/gpu_demo.yaml and configs/gpu_demo_4gpu.yaml, their demo data, that Data-Juicer's own
# config parser and registry accept them (operator names, argument names, CUDA operators), and
# that `eshard-mpi prepare` accepts them through the real registry with no warning.
. "$(dirname "$0")/../e2e/lib.sh"

VENV=${ESHARD_DJ_VENV:-$SRC/.venv-dj}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import data_juicer' 2>/dev/null; then
  bash "$SRC/scripts/setup-dj-env.sh" "$VENV" >/dev/null || fail "cannot set up $VENV"
fi
PY=$VENV/bin/python
ONE=$SRC/configs/gpu_demo.yaml
FOUR=$SRC/configs/gpu_demo_4gpu.yaml
DATA=$SRC/configs/gpu-demo-data

# 1. Structure (yaml from the venv) and data.
run_expect 0 "$PY" - "$ONE" "$FOUR" "$SRC" <<'PY'
import json, os, sys
import yaml

one_path, four_path, src = sys.argv[1:4]
OPS = ["whitespace_normalization_mapper", "query_sentiment_detection_mapper",
       "query_topic_detection_mapper", "text_pair_similarity_filter", "text_length_filter"]
ACCEL = ["cpu", "cuda", "cuda", "cuda", "cpu"]
MODELS = {
    "query_sentiment_detection_mapper": ("hf_model", "mrm8488/distilroberta-finetuned-financial-news-sentiment-analysis"),
    "query_topic_detection_mapper": ("hf_model", "dstefa/roberta-base_topic_classification_nyt_news"),
    "text_pair_similarity_filter": ("hf_clip", "openai/clip-vit-base-patch32"),
}

def ops_of(cfg):
    out = []
    for entry in cfg["process"]:
        assert isinstance(entry, dict) and len(entry) == 1, entry
        (name, args), = entry.items()
        out.append((name, args or {}))
    return out

def common(path):
    cfg = yaml.safe_load(open(path))
    assert cfg["executor_type"] == "ray", cfg["executor_type"]
    assert cfg["ray_address"] == "local", cfg["ray_address"]
    assert "text_key" not in cfg, "Data-Juicer 1.6.1 rejects a top-level text_key"
    assert cfg["text_keys"] == "text", cfg.get("text_keys")
    # dataset_path resolves from the repository root to the bundled text pairs.
    ds = os.path.join(src, cfg["dataset_path"])
    assert os.path.realpath(ds) == os.path.realpath(os.path.join(src, "configs/gpu-demo-data")), ds
    ops = ops_of(cfg)
    assert [n for n, _ in ops] == OPS, [n for n, _ in ops]
    assert [a.get("accelerator") for _, a in ops] == ACCEL, [a.get("accelerator") for _, a in ops]
    for name, args in ops:
        if args.get("accelerator") == "cuda":
            assert args.get("num_gpus") == 1, (name, args)
            assert args.get("ray_execution_mode") == "task", (name, args)
        else:
            assert "num_gpus" not in args and "ray_execution_mode" not in args, (name, args)
        if name in MODELS:
            key, model = MODELS[name]
            assert args.get(key) == model, (name, args.get(key))
        if name.startswith("query_"):
            assert args.get("query_key") == "text", (name, args)
            assert "zh_to_en_hf_model" in args and args["zh_to_en_hf_model"] is None, (name, args)
    sim = dict(ops)["text_pair_similarity_filter"]
    assert sim.get("text_key_second") == "target_text", sim
    return cfg, ops

cfg1, ops1 = common(one_path)
for name, args in ops1:
    if args.get("accelerator") == "cuda":
        assert args.get("num_proc") == 1, (name, args)
assert "override_num_blocks" not in cfg1

cfg4, ops4 = common(four_path)
assert cfg4["override_num_blocks"] == 4, cfg4.get("override_num_blocks")
assert cfg4["dataset_path"] == cfg1["dataset_path"]
for name, args in ops4:
    assert args.get("num_proc") == 4, (name, args)
    assert args.get("batch_size") == 1, (name, args)

rows = [json.loads(l) for l in open(os.path.join(src, "configs/gpu-demo-data/pairs.jsonl"))]
assert len(rows) >= 20, len(rows)
for r in rows:
    assert isinstance(r.get("text"), str) and r["text"].strip(), r
    assert isinstance(r.get("target_text"), str) and r["target_text"].strip(), r
print("structure ok", len(rows), "rows")
PY
expect_out "structure ok"
pass "structure of both recipes and $(sed -n 's/structure ok //p' "$T/out")"

# 2. Data-Juicer itself: every operator is registered with the declared accelerator, and its
#    config parser accepts both recipes (argument names included). executor_type default keeps
#    Ray out of the parse (with ray, the np check starts a local Ray).
for cfg in "$ONE" "$FOUR"; do
  mkdir -p "$T/dj"
  run_expect 0 "$PY" - "$cfg" "$T/dj" <<'PY'
import sys
import yaml
from data_juicer.config import init_configs
from data_juicer.ops.base_op import OPERATORS, Filter, Mapper

path, work = sys.argv[1:3]
raw = yaml.safe_load(open(path))
for entry in raw["process"]:
    (name, args), = entry.items()
    cls = OPERATORS.modules.get(name)
    assert cls is not None, f"{name} is not in Data-Juicer's registry"
    assert issubclass(cls, (Mapper, Filter)), name
    declared = getattr(cls, "_accelerator", "cpu")
    assert declared == args["accelerator"], (name, declared, args["accelerator"])
cfg = init_configs(["--config", path, "--executor_type", "default", "--work_dir", work,
                    "--export_path", work + "/out.jsonl"])
parsed = {list(e)[0]: list(e.values())[0] for e in cfg.process}
for entry in raw["process"]:
    (name, args), = entry.items()
    for k, v in (args or {}).items():
        assert parsed[name][k] == v, (name, k, parsed[name][k], v)
assert getattr(cfg, "override_num_blocks", None) == raw.get("override_num_blocks"), cfg.override_num_blocks
# Data-Juicer's logger takes over sys.stdout while it parses: answer on the real one.
sys.__stdout__.write(f"dj parse ok {getattr(cfg, 'override_num_blocks', None)}\n")
PY
  expect_out "dj parse ok"
done
pass "Data-Juicer's registry and config parser accept both recipes"

# 3. eshard-mpi prepare through the real registry: accepted with no warning, from the given
#    dataset path and (from the repository root) from the recipe's own dataset_path.
for cfg in "$ONE" "$FOUR"; do
  name=$(basename "$cfg" .yaml)
  run_expect 0 "$BIN" prepare --python "$PY" --config "$cfg" --dataset-path "$DATA" \
    --job-dir "$T/j-$name" --num-shards 2
  expect_out "Prepared 2 shards from"
  [ ! -s "$T/err" ] || { cat "$T/err"; fail "prepare of $name printed on stderr"; }
  (cd "$SRC" && run_expect 0 "$BIN" prepare --python "$PY" --config "configs/$name.yaml" \
    --job-dir "$T/k-$name" --num-shards 2) || exit 1
  [ ! -s "$T/err" ] || { cat "$T/err"; fail "prepare of $name from the repo root printed on stderr"; }
  cmp -s "$cfg" "$T/j-$name/recipe.yaml" || fail "recipe.yaml of $name is not a byte copy"
done
pass "prepare accepts both GPU recipes with no warning"
echo "PASS test_gpu_recipes"
