"""Regenerate the pre-lowered example graphs shipped in ``models/data`` (needs torch + transformers).

    python tools/build_examples.py            # all examples
    python tools/build_examples.py gpt2 ...   # some
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from narrowpipe.models.examples import EXAMPLES, build_example, save_shipped  # noqa: E402


def main(names: list[str]) -> None:
    out = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "data")
    os.makedirs(out, exist_ok=True)
    for name in names or list(EXAMPLES):
        t = time.perf_counter()
        graph = build_example(name)
        path = save_shipped(graph, name, out)
        print(f"{name}: {len(graph.nodes)} nodes -> {path} ({os.path.getsize(path) / 1e3:.0f} kB, "
              f"{time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
