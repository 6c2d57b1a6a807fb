"""``python tests/train/ddp_allreduce_counter.py train ...``: ``xdllm`` with every
DistributedDataParallel counting the gradient buckets it all-reduces; each rank prints
``all-reduced buckets: N`` on stderr when it ends. Lightning launches the other ranks with this
same command, so every rank counts."""

import os
import sys

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from xdllm.cli.main import main

buckets = 0
_wrap = DistributedDataParallel.__init__


def _counting_init(self, *args, **kwargs):
    _wrap(self, *args, **kwargs)

    def count_then_all_reduce(state, bucket):
        global buckets
        buckets += 1
        return default_hooks.allreduce_hook(None, bucket)

    self.register_comm_hook(None, count_then_all_reduce)


DistributedDataParallel.__init__ = _counting_init
try:
    main()
finally:
    # one write, newline included: print's two writes let another rank's line fall between them
    sys.stderr.write(f"rank {os.environ.get('LOCAL_RANK', '0')} all-reduced buckets: {buckets}\n")
    sys.stderr.flush()
