"""``narrowpipe analyze MODEL --train``: analyze one training step instead of a forward pass.

Kept out of ``cli.py`` (the house limit on module size): the options, the switch from the forward
graph to the training graph, and the memory table printed after the report.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

__all__ = ["add_train_args", "training_graph", "print_training_memory"]


def add_train_args(p: argparse.ArgumentParser) -> None:
    from .costmodel.training.loss import LOSSES
    from .costmodel.training.optimizer import OPTIMIZERS
    from .costmodel.training.recompute import RECOMPUTE_POLICIES
    g = p.add_argument_group("training step (--train)")
    g.add_argument("--train", action="store_true",
                   help="one training step: forward, backward, optimizer (times by phase, memory by term)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="optimizer update (default adam)")
    g.add_argument("--recompute", choices=RECOMPUTE_POLICIES, default="none",
                   help="activation recomputation (default none)")
    g.add_argument("--loss", choices=LOSSES, default="sum", help="loss on the first output (default sum)")
    g.add_argument("--frozen", type=_patterns, default=(), metavar="NAME[,NAME]",
                   help="parameters without gradient: state-dict names or globs ('model.vision.*'), besides "
                        "those the model itself froze (requires_grad=False)")


def _patterns(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def training_graph(graph: Any, args: argparse.Namespace) -> Any:
    """The training step of ``graph`` when ``--train`` is given, else ``graph`` itself."""
    if not getattr(args, "train", False):
        return graph
    from .costmodel.training import build_training_graph
    return build_training_graph(graph, optimizer=args.optimizer, recompute=args.recompute, loss=args.loss,
                                frozen=args.frozen)


def print_training_memory(forward: Any, args: argparse.Namespace, dims: dict[str, Any], console: Console,
                          timing: Any = None) -> None:
    """Memory per device of one step on one device, against the target's capacity when there is one
    (and how the timed run's chips hold it, where its layout spans several)."""
    if not getattr(args, "train", False):
        return
    from .costmodel.training import training_memory
    from .render.training import memory_table
    mem = training_memory(forward, optimizer=args.optimizer, recompute=args.recompute, loss=args.loss, dims=dims,
                          frozen=args.frozen)
    capacity = None
    if args.target:
        from .backends import get_target
        capacity = get_target(args.target).memory_capacity
    console.print(memory_table(mem, capacity, timing))
