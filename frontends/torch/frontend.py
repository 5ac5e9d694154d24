"""The torch frontend: ``torch.export`` programs and ``torch.fx`` graph modules to IR graphs.

``torch.export`` is the main path: it traces real models (transformers included) on the meta
device without touching weights. Parameters and buffers become weight values from their recorded
shapes and dtypes; tied parameters (GPT-2's embedding and LM head) become one value, so the
parameter count equals ``sum(p.numel() for p in model.parameters())``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ...errors import FrontendError
from ...ir import DimSpec, Graph, Value, ValueKind
from ...ir.verifier import maybe_verify
from ..dim_roles import assign_roles
from .aten_table import ATEN_TABLE, IGNORED
from .export_hints import export_hint
from .lowering import AtenLowerer
from .pt2 import names_from_spec, stamp_dim_names, stamped_dim_names
from .static_cache import KV_CACHE_META, static_cache_buffers
from .types import SymbolTable

__all__ = ["from_torch", "from_exported_program", "from_graph_module", "load_pt2", "export_module"]


def export_module(module: torch.nn.Module, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None,
                  *, dynamic_shapes: Any = None, strict: bool = False) -> ExportedProgram:
    """``torch.export.export`` with errors turned into :class:`FrontendError`, and the names of the
    ``Dim``s recorded on the program (torch keeps only ``s77``), for :func:`from_torch` and
    :func:`~.pt2.save_pt2`."""
    try:
        ep = torch.export.export(module, tuple(args), dict(kwargs or {}), dynamic_shapes=dynamic_shapes,
                                 strict=strict)
    except Exception as exc:  # torch raises many types; the user needs the reason and the module
        hint = export_hint(module, args, kwargs, exc)   # the fix before torch's long message
        raise FrontendError(f"torch.export failed for {type(module).__name__}: {hint}{type(exc).__name__}: {exc}"
                            ) from exc
    stamp_dim_names(ep, _dim_names(module, tuple(args), kwargs or {}, dynamic_shapes))  # torch drops them
    return ep


def from_torch(module: Any, args: tuple[Any, ...] | None = None, kwargs: Mapping[str, Any] | None = None, *,
               dynamic_shapes: Any = None, strict: bool = False, name: str | None = None) -> Graph:
    """Lower an ``nn.Module`` (exported here), an ``ExportedProgram`` or an fx ``GraphModule``.

    ``dynamic_shapes`` follows ``torch.export``; dims given as ``torch.export.Dim("batch")`` keep
    their names in the IR, with the example input's size as default binding, and get a role
    (:class:`~narrowpipe.ir.DimRole`) from their name or their place (dim 0 of ``input_ids`` is the batch).
    """
    if isinstance(module, ExportedProgram):
        from .pt2 import _program_names
        return from_exported_program(module, strict=strict, name=name,
                                     dim_names=_program_names(module, dynamic_shapes) or None)
    if isinstance(module, fx.GraphModule) and _is_aten_level(module):
        return from_graph_module(module, tuple(args or ()), strict=strict, name=name)
    if not isinstance(module, torch.nn.Module):
        raise FrontendError("from_torch expects an nn.Module, ExportedProgram or GraphModule, "
                            f"got {type(module).__name__}")
    args = tuple(args or ())
    t0 = time.perf_counter()
    ep = export_module(module, args, kwargs, dynamic_shapes=dynamic_shapes)
    export_s = time.perf_counter() - t0
    names = _dim_names(module, args, kwargs or {}, dynamic_shapes)
    graph = from_exported_program(ep, strict=strict, name=name or type(module).__name__, dim_names=names)
    graph.meta["export_seconds"] = export_s
    return graph


def from_exported_program(ep: ExportedProgram, *, strict: bool = False, name: str | None = None,
                          dim_names: Mapping[tuple[str, int], str] | None = None, file: str = "") -> Graph:
    gm = ep.graph_module
    sig = ep.graph_signature
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    renames = _rename_symbols(ep, placeholders, dim_names or stamped_dim_names(ep))
    symbols = SymbolTable(renames)
    graph = Graph(name or "exported_program")
    graph.meta.update({"source": "torch.export", "torch_version": torch.__version__})
    state = {**ep.state_dict, **getattr(ep, "constants", {})}
    by_tensor: dict[tuple[Any, ...], Value] = {}
    mapping: dict[fx.Node, Any] = {}
    caches = static_cache_buffers(ep)    # a StaticCache's KV buffers: state, not weights
    for spec, node in zip(sig.input_specs, placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            mapping[node] = None
            continue
        kind = {InputKind.PARAMETER: ValueKind.PARAM, InputKind.BUFFER: ValueKind.BUFFER,
                InputKind.CONSTANT_TENSOR: ValueKind.CONST}.get(spec.kind, ValueKind.INPUT)
        if kind is ValueKind.INPUT or node.name in caches:
            mapping[node] = graph.add_input(node.name, symbols.tensor_type(val), ValueKind.INPUT,
                                            source_name=spec.target or node.name)
            continue
        tensor = state.get(spec.target) if spec.target else None
        key = _storage_key(tensor) if isinstance(tensor, torch.Tensor) else None
        if key is not None and key in by_tensor:  # a tied parameter: the same storage
            mapping[node] = by_tensor[key]
            continue
        value = graph.add_input(node.name, symbols.tensor_type(val), kind, source_name=spec.target or node.name)
        if key is not None:
            by_tensor[key] = value
        if kind is ValueKind.PARAM and isinstance(tensor, torch.Tensor) and not tensor.requires_grad:
            graph.meta.setdefault(FROZEN_PARAMS_META, []).append(value.source_name)
        mapping[node] = value
    if caches:
        graph.meta[KV_CACHE_META] = [{"name": mapping[n].name, "batch_axis": caches[n.name]["batch_axis"],
                                      "length_axis": caches[n.name]["length_axis"]}
                                     for n in placeholders if n.name in caches]
    theta = rope_theta_of(state)
    if theta is not None:
        graph.meta[ROPE_THETA_META] = theta
    _declare_dims(graph, ep, placeholders, renames)
    assign_roles(graph)  # batch / sequence / KV length, from the Dim names and input positions
    constants = {node: state[spec.target] for spec, node in zip(sig.input_specs, placeholders)
                 if spec.target in state and isinstance(state[spec.target], torch.Tensor)}
    lowerer = AtenLowerer(graph, symbols, ATEN_TABLE, IGNORED, file=file, strict=strict, root=gm,
                          constants=constants)
    outputs = lowerer.lower(gm.graph, mapping, lambda n: lowerer.get_attr(gm, n))
    graph.set_outputs(outputs)
    graph.meta[MODULE_CALLS_META] = module_calls(gm)
    return maybe_verify(graph, "the torch frontend")


#: ``graph.meta`` key: the state-dict names of parameters with ``requires_grad=False`` (what the
#: training builder's ``trainable`` reads as ``FROZEN_META``; the frontend must not import it).
FROZEN_PARAMS_META = "frozen_params"

#: ``graph.meta`` key: the rotary base read from a ``rotary_emb.inv_freq`` buffer's values (what the
#: serving recogniser, ``costmodel/serving/recognise.py``, gives the model's spec as ``rope_theta``).
ROPE_THETA_META = "rope_theta"


def rope_theta_of(state: Mapping[str, Any]) -> float | None:
    """The rotary base behind Hugging Face's ``inv_freq[i] = theta ** (-2 i / d)`` buffer, or None
    (no such buffer, or one on the meta device with no values). Fitted in log space over the first
    quarter of the frequencies, which Llama-3.1-style scaling leaves alone (it rescales only the low
    ones), and rounded to the digits the buffer's format holds (a bf16 buffer: two)."""
    for name, t in state.items():
        if not (name.endswith("rotary_emb.inv_freq") and isinstance(t, torch.Tensor)) or t.is_meta or t.numel() < 2:
            continue
        n = t.numel()
        y = t.detach().double().flatten()[1:max(2, n // 4 + 1)].log()
        i = torch.arange(1, len(y) + 1, dtype=torch.float64)
        log_theta = float(-n * (i * y).sum() / (i * i).sum())
        digits = 2 if t.element_size() < 4 else 6
        return float(f"{torch.tensor(log_theta).exp().item():.{digits}g}")
    return None


#: ``graph.meta`` key: how many ``nn.Module`` calls the exported forward made.
MODULE_CALLS_META = "module_calls"


def module_calls(gm: fx.GraphModule) -> int:
    """The ``nn.Module`` calls of the traced forward: the distinct entries of the nodes'
    ``nn_module_stack`` (export keys each call of a module, a repeated call as ``name@1``). An eager
    run pays ``nn.Module.__call__`` for each; a module none of whose code reached an aten op
    (``nn.Identity``) leaves no entry and is not counted, so the count can fall short of the eager
    run's (an eval-mode dropout still records ``aten.dropout`` and is counted)."""
    keys: set[str] = set()
    for node in gm.graph.nodes:
        keys.update(node.meta.get("nn_module_stack") or ())
    return len(keys)


def from_graph_module(gm: fx.GraphModule, args: tuple[Any, ...] = (), *, strict: bool = False,
                      name: str | None = None) -> Graph:
    """An ATen-level GraphModule (``ep.module()``, ``make_fx``): propagate fake shapes, then lower."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any("val" not in n.meta for n in gm.graph.nodes if n.op in ("placeholder", "call_function")):
        if not args and any(p.meta.get("val") is None for p in placeholders):
            raise FrontendError("this GraphModule has no recorded shapes; pass example args to from_torch")
        _propagate_fake(gm, args)
    symbols = SymbolTable()
    graph = Graph(name or type(gm).__name__)
    graph.meta.update({"source": "torch.fx", "torch_version": torch.__version__})
    mapping: dict[fx.Node, Any] = {}
    for node in placeholders:
        val = node.meta.get("val")
        mapping[node] = graph.add_input(node.name, symbols.tensor_type(val)) if isinstance(val, torch.Tensor) else None
    params = {id(p): n for n, p in gm.named_parameters(remove_duplicate=False)}
    buffers = {id(b): n for n, b in gm.named_buffers(remove_duplicate=False)}
    seen: dict[int, Value] = {}
    lowerer = AtenLowerer(graph, symbols, ATEN_TABLE, IGNORED, strict=strict, root=gm)

    def get_attr(node: fx.Node) -> Any:
        obj: Any = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor):
            if id(obj) in seen:
                return seen[id(obj)]
            kind = ValueKind.PARAM if id(obj) in params else ValueKind.BUFFER if id(obj) in buffers else ValueKind.CONST
            seen[id(obj)] = graph.add_input(node.name, symbols.tensor_type(obj), kind, source_name=str(node.target))
            if kind is ValueKind.PARAM and not obj.requires_grad:
                graph.meta.setdefault(FROZEN_PARAMS_META, []).append(str(node.target))
            return seen[id(obj)]
        return obj

    graph.set_outputs(lowerer.lower(gm.graph, mapping, get_attr))
    calls = module_calls(gm)
    if calls:   # ``ep.module()`` keeps the export's module stacks; a make_fx trace has none (not counted)
        graph.meta[MODULE_CALLS_META] = calls
    return maybe_verify(graph, "the torch.fx frontend")


def load_pt2(path: str | Path, *, strict: bool = False, dynamic_shapes: Any = None) -> Graph:
    """A program saved with ``torch.export.save``: see :mod:`.pt2`."""
    from .pt2 import load_pt2 as impl
    return impl(path, strict=strict, dynamic_shapes=dynamic_shapes)


# -- helpers ------------------------------------------------------------------------------------

def _storage_key(t: torch.Tensor) -> tuple[Any, ...]:
    """What makes two state-dict entries one weight. In memory a tied parameter is one object, but
    ``torch.export.load`` hands back a separate tensor per name over one shared storage (GPT-2's
    ``wte`` and ``lm_head``), so object identity would count the embedding twice. Meta and fake
    tensors have no storage address (all read 0), so for them only identity can tell."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:  # tensor subclasses without a real storage
        ptr = 0
    if t.device.type == "meta" or ptr == 0:
        return ("object", id(t))
    return ("storage", t.device.type, ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _is_aten_level(gm: fx.GraphModule) -> bool:
    for n in gm.graph.nodes:
        if n.op == "call_method" or (n.op == "call_module" and not str(n.target).startswith("_guards")):
            return False
        aten_op = isinstance(n.target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator))
        if n.op == "call_function" and not aten_op:
            python_op = getattr(n.target, "__module__", "") in ("_operator", "operator")
            if not python_op and "sym" not in getattr(n.target, "__name__", ""):
                return False
    return True


def _propagate_fake(gm: fx.GraphModule, args: tuple[Any, ...]) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    try:
        FakeTensorProp(gm, mode).propagate(*fake_args)
    except Exception as exc:
        raise FrontendError(f"shape propagation failed: {type(exc).__name__}: {exc}") from exc


def _dim_names(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               dynamic_shapes: Any) -> dict[tuple[str, int], str]:
    """(input name, dim index) -> the Dim's name, from a ``dynamic_shapes`` spec."""
    if dynamic_shapes is None:
        return {}
    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    names = list(bound.arguments)
    if isinstance(dynamic_shapes, Mapping):
        return names_from_spec(dynamic_shapes)
    return names_from_spec({names[i]: s for i, s in enumerate(dynamic_shapes) if i < len(names)})


def _rename_symbols(ep: ExportedProgram, placeholders: list[fx.Node],
                    dim_names: Mapping[tuple[str, int], str]) -> dict[str, str]:
    """torch's symbol (``s72``) -> a readable name: the user's Dim name, else ``<input>_<dim>``."""
    out: dict[str, str] = {}
    user = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    user_nodes = {s.arg.name for s in user if hasattr(s.arg, "name")}
    for node in placeholders:
        if node.name not in user_nodes:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for i, d in enumerate(val.shape):
            if isinstance(d, torch.SymInt):
                expr = d.node.expr
                if getattr(expr, "is_symbol", False):
                    sym = str(expr)
                    if sym not in out:
                        out[sym] = dim_names.get((node.name, i)) or f"{node.name}_{i}"
    return out


def _declare_dims(graph: Graph, ep: ExportedProgram, placeholders: list[fx.Node], renames: Mapping[str, str]) -> None:
    """Each named dim with its example size as default and its export range."""
    examples: dict[str, int] = {}
    example_inputs = getattr(ep, "example_inputs", None)
    if example_inputs:
        try:
            flat = torch.utils._pytree.tree_leaves(example_inputs)
            user_ph = [n for n in placeholders if n.name in {v.name for v in graph.inputs}]
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            for node, t in zip(user_ph, tensors):
                val = node.meta["val"]   # missing or None: the except below gives up on examples
                for d, size in zip(val.shape, t.shape):
                    if isinstance(d, torch.SymInt) and str(d.node.expr) in renames:
                        examples.setdefault(renames[str(d.node.expr)], int(size))
        except Exception:  # example inputs are a convenience, never a reason to fail
            pass
    for sym, name in renames.items():
        lo = hi = None
        for key, rng in ep.range_constraints.items():
            if str(key) == sym:
                lo, hi = _finite_int(rng.lower), _finite_int(rng.upper)
        graph.declare_dim(DimSpec(name, examples.get(name), lo, hi))


def _finite_int(x: Any) -> int | None:
    """A range bound as an int, or None for torch's (int_oo) and sympy's infinities."""
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
