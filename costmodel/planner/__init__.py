"""Parallel planning: how a model is sharded over a device mesh, what each device holds, how long a
training step takes and where the time goes (issue 9).

The pieces, in the order data flows: :mod:`.strategy` (the :class:`Parallel` value), :mod:`.blocks`
(the model cut into repeated layers), :mod:`.runtime_form` (a block as the training runtime runs it:
fused kernels, attention form, padded vocabulary), :mod:`.sharding` (the sharding pass that inserts collectives),
:mod:`.block_cost` (one block's training step on one device), :mod:`.step` and :mod:`.pipeline`
(combining block costs into a step), :mod:`.memory`, :mod:`.search`, :mod:`.plan` (the result), and
:mod:`.schedule` (a plan's step as timed forward/backward slots in the pipeline's order) and :mod:`.simulated`
(the plan's step time from that schedule, and the search's ranking by it).
"""

from .plan import Plan, RunnerUp
from .shard_api import shard
from .stages import pipeline_stage
from .strategy import Parallel

__all__ = ["Parallel", "Plan", "RunnerUp", "shard", "pipeline_stage"]
