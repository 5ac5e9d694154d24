"""Models narrowpipe builds or ships: the transformer builder (IR without torch) and bundled examples.

``transformer(...)`` and ``from_config(config)`` write a graph directly from an architecture's sizes;
``examples`` holds the pre-lowered exports the CLI ships (importing it needs no torch either).
"""

from .decoder import build, transformer
from .from_config import from_config
from .spec import TransformerSpec

__all__ = ["transformer", "from_config", "build", "TransformerSpec"]
