"""What to do when ``torch.export`` refuses a model: a hint placed before torch's own message.

torch's messages name the mechanism (an unregistered pytree type, a guard on a data-dependent
symbol) and not the fix a narrowpipe user needs: a transformers KV cache is exported as a decode
step by :func:`narrowpipe.export_decode_step`, and a transformers mixture of experts whose experts
run as a Python loop over the routed experts (``experts_implementation="eager"``) exports with the
grouped or batched implementations, which have no data-dependent branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["export_hint"]

_DATA_DEPENDENT = ("GuardOnDataDependentSymNode", "data-dependent", "data dependent")


def export_hint(module: Any, args: Iterable[Any], kwargs: Mapping[str, Any] | None, exc: BaseException) -> str:
    """A sentence (ending in ": ") saying the likely cause and the fix, or "" when none applies."""
    text = f"{type(exc).__name__}: {exc}"
    caches = sorted({type(x).__name__ for x in [*args, *(kwargs or {}).values()] if _is_transformers_cache(x)})
    if caches and ("pytree" in text or "Unsupported input type" in text):
        return (f"a transformers {caches[0]} passed as an input cannot be flattened by torch.export; export a "
                "decode step with narrowpipe.export_decode_step(model, batch=B, past=P) (it registers the cache "
                "and exports one token's step with a KV length dim) or drop the cache (use_cache=False): ")
    if any(key in text for key in _DATA_DEPENDENT):
        config = getattr(module, "config", None)
        if getattr(config, "_experts_implementation", None) == "eager":
            return ("the mixture of experts runs its experts as a loop over the experts that tokens were routed "
                    "to, which branches on tensor values (a data-dependent guard); export it with "
                    'experts_implementation="grouped_mm" (transformers\' default) or "batched_mm" '
                    '(model.set_experts_implementation("grouped_mm"), or experts_implementation= in '
                    "from_pretrained/the config): ")
        return ("the model branches on tensor values (a data-dependent guard, e.g. a loop over routed experts, "
                "`.item()` or `if x.any()`), which torch.export cannot trace; export a formulation without it "
                "(for a transformers mixture of experts, experts_implementation=\"grouped_mm\" or \"batched_mm\") "
                "or guard it with torch._check: ")
    return ""


def _is_transformers_cache(x: Any) -> bool:
    """A transformers ``Cache`` (``DynamicCache``, ``StaticCache``, ...), recognised without importing it."""
    return any(t.__module__.startswith("transformers.") and t.__name__ == "Cache" for t in type(x).__mro__)
