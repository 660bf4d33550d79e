"""A custom Data-Juicer Mapper for tests/dj/test_dj_cpus.sh.

eshard_test_cpus_mapper appends one JSON line per batch to the file `record`: the process id,
the CPUs the process may run on (os.sched_getaffinity) and the CPUs of the Ray cluster it runs
in (ray.cluster_resources), so the test sees what a Data-Juicer operator really got. Samples
pass through unchanged.
"""
import json
import os

from data_juicer.ops.base_op import OPERATORS, Mapper

OP_NAME = "eshard_test_cpus_mapper"


@OPERATORS.register_module(OP_NAME)
class EshardTestCpusMapper(Mapper):
    """Records the CPUs it runs on; otherwise the identity."""

    _batched_op = True

    def __init__(self, record: str = "", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.record = record

    def process_batched(self, samples):
        import ray

        line = {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
                "ray_cpus": ray.cluster_resources().get("CPU") if ray.is_initialized() else None}
        with open(self.record, "a") as f:
            f.write(json.dumps(line) + "\n")
        return samples
