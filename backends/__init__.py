"""What the machine is, as data: target schemas per family, systems, and the chip catalog.

Everything here describes hardware; nothing computes a cost. A target is a frozen dataclass with SI
numbers and a source for each; the catalog ships real chips as TOML files and a user's own chip is
one more TOML file, passed by path wherever a target name is accepted.

    >>> from narrowpipe.backends import get_target
    >>> h100 = get_target("h100")
    >>> h100.matrix_flops["bf16"], h100.memory_bandwidth
    (989000000000000.0, 3350000000000.0)
    >>> h100.scaled(hbm_bandwidth=2).memory_bandwidth
    6700000000000.0
"""

from __future__ import annotations

from .families import TARGET_CLASSES, CpuTarget, DataflowTarget, GpuTarget, TpuTarget
from .frozen import FrozenMap
from .loader import (
                     dump_system,
                     dump_target,
                     load_system_file,
                     load_target_file,
                     system_from_dict,
                     system_to_dict,
                     target_from_dict,
                     target_to_dict,
)
from .registry import clear_cache, get_system, get_target, name_index, source_refs, systems, targets
from .scaling import RESOURCES
from .system import Level, System
from .target import Target
from .vocab import CATALOG_PRICE_BASIS, DTYPES, FAMILIES, PRICE_BASES, TOPOLOGIES

__all__ = [
    # schema
    "Target", "GpuTarget", "TpuTarget", "DataflowTarget", "CpuTarget", "TARGET_CLASSES",
    "System", "Level", "FrozenMap",
    # vocabularies
    "DTYPES", "FAMILIES", "TOPOLOGIES", "RESOURCES", "PRICE_BASES", "CATALOG_PRICE_BASIS",
    # catalog
    "targets", "get_target", "systems", "get_system", "source_refs", "clear_cache", "name_index",
    # files
    "load_target_file", "dump_target", "target_from_dict", "target_to_dict",
    "load_system_file", "dump_system", "system_from_dict", "system_to_dict",
]
