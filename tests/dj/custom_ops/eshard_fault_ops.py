"""Custom Data-Juicer Mappers for tests/dj/test_dj_runner.sh (the persistent per-rank runner).

eshard_test_fault_mapper(flag, mode): the identity, except once: the first run that finds the
file `flag` removes it and then
  - mode "exit_driver": ends its own Python process with os._exit(3) while the operator is
    built (in the Data-Juicer driver: the runner itself in per-rank mode);
  - mode "raise": raises RuntimeError from process_single (in a Ray worker; the attempt fails
    only with skip_op_error: false, since Data-Juicer 1.6.1's default true drops the row).

eshard_test_state_probe_mapper(): the identity; while it is built (in the driver) it records
Data-Juicer state that a run could leave behind for the next one in
<export folder>/../state_probe.json (the attempt folder): tempfile.tempdir, whether datasets
caching is on, the driver's MODEL_ZOO keys, global_cfg's export path, the probe module's own
counter; then it changes all of them, as an operator or a recipe (use_cache: false) may.
"""
import json
import os
import tempfile

from data_juicer.ops.base_op import OPERATORS, Mapper

_BUILT = 0


def _in_driver():
    """True in the Data-Juicer driver (the runner), False in a Ray worker (which may build
    operators too, e.g. when it unpickles them)."""
    try:
        import ray
        return ray._private.worker.global_worker.mode != ray.WORKER_MODE
    except Exception:
        return True


def _take(flag):
    try:
        os.remove(flag)
        return True
    except OSError:
        return False


@OPERATORS.register_module("eshard_test_fault_mapper")
class EshardTestFaultMapper(Mapper):
    def __init__(self, flag: str = "", mode: str = "raise", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flag = flag
        self.mode = mode
        if mode == "exit_driver" and flag and _in_driver() and _take(flag):
            os._exit(3)

    def process_single(self, sample):
        if self.mode == "raise" and self.flag and _take(self.flag):
            raise RuntimeError("eshard_test_fault_mapper: raising as asked")
        return sample


@OPERATORS.register_module("eshard_test_state_probe_mapper")
class EshardTestStateProbeMapper(Mapper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        global _BUILT
        _BUILT += 1
        import datasets
        from data_juicer.config import config as djc
        from data_juicer.utils import model_utils
        export = djc.global_cfg.export_path if djc.global_cfg is not None else None
        seen = {
            "pid": os.getpid(),
            "tempdir": tempfile.tempdir,
            "caching": datasets.is_caching_enabled(),
            "zoo": sorted(k for k in model_utils.MODEL_ZOO if str(k).startswith("eshard_probe")),
            "export_path": export,
            "built": _BUILT,
        }
        attempt = os.path.dirname(export)
        if _BUILT > 1:
            return  # built again in the same run: the first build recorded what the run began with
        with open(os.path.join(attempt, "state_probe.json"), "w") as f:
            json.dump(seen, f)
        tempfile.tempdir = attempt
        datasets.disable_caching()
        model_utils.MODEL_ZOO["eshard_probe_" + os.path.basename(attempt)] = object()

    def process_single(self, sample):
        return sample
