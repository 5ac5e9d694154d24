"""Profiler traces as a frontend: :mod:`.read` parses Kineto's Chrome-trace JSON, and :mod:`.lower`
turns each recorded aten call (name, shapes, dtypes) into a one-op IR graph, so ``diagnose`` costs
measured ops with the same rules as every graph. Needs no torch."""
