"""A slow custom Data-Juicer Mapper for the preemption tests (tests/dj/test_dj_preempt.sh).

eshard_test_slow_mapper sleeps `seconds` per sample while the file `flag` exists, and touches
`flag + ".running"` when it starts sleeping, so a test knows that a shard is being processed.
Without the flag it passes samples through unchanged.
"""
import os
import time

from data_juicer.ops.base_op import OPERATORS, Mapper

OP_NAME = "eshard_test_slow_mapper"


@OPERATORS.register_module(OP_NAME)
class EshardTestSlowMapper(Mapper):
    """Sleeps per sample while a flag file exists; otherwise the identity."""

    def __init__(self, flag: str = "", seconds: float = 1.0, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.flag = flag
        self.seconds = seconds

    def process_single(self, sample):
        if self.flag and os.path.exists(self.flag):
            with open(self.flag + ".running", "a"):
                pass
            time.sleep(self.seconds)
        return sample
