"""A custom Data-Juicer Mapper for tests/dj/test_op_kinds.sh.

Loaded through a recipe's custom_operator_paths (Data-Juicer's own loader), it registers
eshard_test_upper_mapper in Data-Juicer's OPERATORS registry, so that eshard-mpi's prepare
must accept it as a Mapper although no built-in operator has that name.
"""

from data_juicer.ops.base_op import OPERATORS, Mapper

OP_NAME = "eshard_test_upper_mapper"


@OPERATORS.register_module(OP_NAME)
class EshardTestUpperMapper(Mapper):
    """Upper-cases the text field of every sample."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def process_single(self, sample):
        sample[self.text_key] = sample[self.text_key].upper()
        return sample
