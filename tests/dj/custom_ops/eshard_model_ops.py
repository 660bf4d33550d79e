"""A model-bearing Data-Juicer Mapper for the model reuse tests (tests/dj/test_dj_models_*.sh).

eshard_test_model_mapper(load_log, suffix, flag, mode): loads its "model" through Data-Juicer's
own prepare_model/get_model, with a loader (model type "eshard_counting") that appends one line
"<pid>" to load_log per load; appends the model's suffix to each text. Once, on the first row
that finds the file `flag` and removes it, it fails:
  - mode "raise": raises RuntimeError (the attempt fails with skip_op_error: false);
  - mode "crash": ends its Python process (a Ray worker or actor) with os._exit(7).
"""
import os

from data_juicer.ops.base_op import OPERATORS, Mapper
from data_juicer.utils.model_utils import MODEL_FUNCTION_MAPPING, get_model, prepare_model


def load_counting_model(load_log, suffix, device="cpu", **_):
    fd = os.open(load_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return {"suffix": suffix}


MODEL_FUNCTION_MAPPING["eshard_counting"] = load_counting_model


def _take(flag):
    try:
        os.remove(flag)
        return True
    except OSError:
        return False


@OPERATORS.register_module("eshard_test_model_mapper")
class EshardTestModelMapper(Mapper):
    def __init__(self, load_log: str = "", suffix: str = " +m", flag: str = "", mode: str = "raise",
                 *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flag = flag
        self.mode = mode
        self.model_key = prepare_model("eshard_counting", load_log=load_log, suffix=suffix)

    def process_single(self, sample, rank=None):
        model = get_model(self.model_key, rank)
        if self.flag and _take(self.flag):
            if self.mode == "crash":
                os._exit(7)
            raise RuntimeError("eshard_test_model_mapper: raising as asked")
        sample[self.text_key] = sample[self.text_key] + model["suffix"]
        return sample
