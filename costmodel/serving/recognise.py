"""Recognising a lowered causal LM as the model builder's architecture, so it can be rebuilt.

Why: an export made without a KV cache (``use_cache=False``, the bundled examples) has no cache for
a decode step to read, and its attention mask and shapes were traced for prefill. Rather than patch
a traced graph, serving rebuilds the same architecture with :func:`narrowpipe.models.build` and a
``past`` dim of role ``KV_LENGTH``. The architecture is read from the weights' state-dict names and
shapes (Hugging Face's Llama and GPT-2 layouts) and the attention nodes (heads, head dim); then the
rebuilt prefill graph must give the original's parameter count and its contraction and attention
FLOPs exactly at the same dims, or the recognition is refused: a twin that differs is no twin.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from ...ir import DimRole, DType, Graph, Op, OpGroup, Value, attention_dims
from ...ir.dims import Dim
from ...models.spec import TransformerSpec

__all__ = ["spec_from_graph", "why_not_recognised", "check_twin", "ROPE_THETA_META"]

_LAYER = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.")


def _n(d: Dim) -> int:
    """A static dim (a weight's sizes are static; a symbolic one is not a layout we know)."""
    if isinstance(d, int):
        return d
    raise ValueError(f"symbolic weight dim {d}")


def _ints(shape: tuple[Dim, ...]) -> list[int]:
    """Static dims as they are, symbolic ones as 0 (only the static head counts are read)."""
    return [d if isinstance(d, int) else 0 for d in shape]


def _weights(graph: Graph) -> dict[str, Value]:
    return {v.source_name or v.name: v for v in graph.weights}


def _layers(names: Mapping[str, Value]) -> int:
    found = {int(m.group(1)) for n in names if (m := _LAYER.search(n))}
    return max(found) + 1 if found else 0


def _heads(graph: Graph) -> tuple[int, int] | None:
    """(query heads, head dim) of the first attention node, in any layout; an export's eager
    attention (MatMul, Softmax, MatMul) is read as the fused node serving makes of it
    (:mod:`..eager_attention`, on a clone: recognising changes nothing)."""
    found = _fused_heads(graph)
    if found is None and any(n.op is Op.SOFTMAX for n in graph.nodes):
        from ..eager_attention import attention_from_eager
        clone = graph.clone()
        if attention_from_eager(clone):
            found = _fused_heads(clone)
    return found


def _fused_heads(graph: Graph) -> tuple[int, int] | None:
    for node in graph.nodes:
        if node.op is Op.ATTENTION and len(node.inputs) >= 3 and all(v is not None for v in node.inputs[:3]):
            q, k, v = (_ints(x.shape) for x in node.inputs[:3] if x is not None)
            a = attention_dims(node.attrs, q, k, v)
            if isinstance(a.heads, int) and isinstance(a.d, int):
                return a.heads, a.d
    return None


def _activation(graph: Graph) -> str:
    for node in graph.nodes:
        if node.op is Op.SILU:
            return "silu"
        if node.op is Op.GELU:
            return "gelu_tanh" if node.attrs.get("approximate") == "tanh" else "gelu"
    # GPT-2's gelu_new is exported as its tanh formula, not one GELU node
    return "gelu_tanh" if any(n.op is Op.TANH for n in graph.nodes) else "gelu"


def _llama(w: Mapping[str, Value], graph: Graph, heads: int, head_dim: int) -> TransformerSpec | None:
    layers = _layers(w)
    embed = w.get("model.embed_tokens.weight")
    q, k = w.get("model.layers.0.self_attn.q_proj.weight"), w.get("model.layers.0.self_attn.k_proj.weight")
    up = w.get("model.layers.0.mlp.up_proj.weight")
    if not (layers and embed and q and k and up) or any(n.startswith("model.layers.0.block_sparse_moe") for n in w):
        return None
    gated = "model.layers.0.mlp.gate_proj.weight" in w
    vocab, hidden = (_n(d) for d in embed.shape)
    head = w.get("lm_head.weight")
    tie = head is None or head is embed
    return TransformerSpec(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, ffn=_n(up.shape[0]),
        kv_heads=_n(k.shape[0]) // head_dim, head_dim=head_dim, gated_mlp=gated, activation=_activation(graph),
        tie_embeddings=tie, norm="rms", positions="rotary" if any("rotary_emb" in n for n in w) else "none",
        attn_bias="model.layers.0.self_attn.q_proj.bias" in w, out_bias="model.layers.0.self_attn.o_proj.bias" in w,
        mlp_bias="model.layers.0.mlp.up_proj.bias" in w, dtype=embed.type.dtype)


def _gpt2(w: Mapping[str, Value], graph: Graph, heads: int, head_dim: int) -> TransformerSpec | None:
    layers = _layers(w)
    # tied embeddings are one tensor: transformer.wte.weight, or lm_head.weight where the exporter
    # kept the head's name for it (torch.onnx's dynamo path)
    wte = w.get("transformer.wte.weight") or w.get("lm_head.weight")
    wpe = w.get("transformer.wpe.weight")
    fc = w.get("transformer.h.0.mlp.c_fc.weight")
    if not (layers and wte and wpe and fc):
        return None
    vocab, hidden = (_n(d) for d in wte.shape)
    tied = "transformer.wte.weight" not in w or "lm_head.weight" not in w
    return TransformerSpec(
        layers=layers, hidden=hidden, heads=heads, vocab=vocab, ffn=_n(fc.shape[1]), kv_heads=heads,
        head_dim=head_dim, activation=_activation(graph), tie_embeddings=tied, norm="layer",
        positions="learned", max_positions=_n(wpe.shape[0]), attn_bias=True, out_bias=True, mlp_bias=True,
        dtype=wte.type.dtype)


def spec_from_graph(graph: Graph) -> TransformerSpec | None:
    """The builder spec of a Llama- or GPT-2-layout causal LM graph, or None when not recognised."""
    meta = graph.meta.get("spec")
    if graph.meta.get("builder") == "narrowpipe.models.transformer" and isinstance(meta, dict):
        fields = dict(meta)
        fields["dtype"] = DType.parse(str(fields["dtype"]))
        return TransformerSpec(**fields)
    heads = _heads(graph)
    if heads is None:
        return None
    w = _weights(graph)
    for reader in (_llama, _gpt2):
        try:
            spec = reader(w, graph, *heads)
        except (ValueError, TypeError, ZeroDivisionError):   # a shape that is not this layout's
            spec = None
        if spec is not None:
            return _with_rope_theta(_with_export_positions(spec, graph), graph)
    return None


def why_not_recognised(graph: Graph) -> str:
    """What :func:`spec_from_graph` lacked, in the user's terms: a refusal that names a layout the
    graph seems to have (GPT-2 state-dict names) must say which part did not fit."""
    if _heads(graph) is None:
        eager = any(n.op is Op.SOFTMAX for n in graph.nodes)
        return ("it has no attention node to read the head count and head dim from"
                + (" (it has a Softmax, but not in an eager MatMul-Softmax-MatMul attention over "
                   "[batch, heads, seq, head_dim] tensors that serving reads as one)" if eager else ""))
    names = sorted(_weights(graph))
    return ("its weights are not named in a layout it knows: Llama (model.embed_tokens.weight, "
            "model.layers.N.self_attn.q_proj.weight, ...) or GPT-2 (transformer.wte.weight, transformer.wpe.weight, "
            f"transformer.h.N.mlp.c_fc.weight); this graph has {', '.join(names[:3]) or 'no weights'}"
            + (", ..." if len(names) > 3 else ""))


#: ``graph.meta`` key: the rotary base a frontend read from the model's ``rotary_emb.inv_freq`` values.
ROPE_THETA_META = "rope_theta"


def _with_rope_theta(spec: TransformerSpec, graph: Graph) -> TransformerSpec:
    """A rotary model's base is in its inv_freq buffer's values, which the IR does not keep: the
    frontend records it (``graph.meta["rope_theta"]``) when the export had real values; a bundled
    example (exported on the meta device) has its config's. Otherwise it stays unknown (None)."""
    if spec.positions != "rotary" or spec.rope_theta is not None:
        return spec
    theta = graph.meta.get(ROPE_THETA_META)
    if theta is None:
        from ...models.examples import EXAMPLES
        example = EXAMPLES.get(str(graph.meta.get("example", "")))
        theta = example.rope_theta if example is not None else None
    return dataclasses.replace(spec, rope_theta=float(theta)) if theta else spec


def _with_export_positions(spec: TransformerSpec, graph: Graph) -> TransformerSpec:
    """A rotary model's weights do not say how many positions it handles; its export does: the
    sequence dim's declared maximum (the bundled Llama-3 exports: 8,192, the config's
    ``max_position_embeddings``). Without it a 200k-token context was costed as if it ran."""
    if spec.max_positions is not None:
        return spec
    limits = [d.max for d in graph.dims.values() if d.role is DimRole.SEQUENCE and d.max]
    return dataclasses.replace(spec, max_positions=max(limits)) if limits else spec


def _counted(graph: Graph, dims: Mapping[str, int]) -> tuple[int, int]:
    from ..analyze import analyze
    r = analyze(graph, dims=dict(dims))
    heavy = sum(r.flops_by_group[g.value] for g in (OpGroup.CONTRACTION, OpGroup.ATTENTION))
    return r.params, heavy


def check_twin(graph: Graph, twin: Graph, *, batch: int = 2, seq: int = 16) -> str | None:
    """None when ``twin`` has ``graph``'s parameters and contraction + attention FLOPs at
    ``batch`` x ``seq``, else what differs."""
    def dims(g: Graph) -> dict[str, int]:
        out = {n: batch for n in g.dims_with_role(DimRole.BATCH)}
        out.update({n: seq for n in g.dims_with_role(DimRole.SEQUENCE)})
        out.update({n: 0 for n in g.dims_with_role(DimRole.KV_LENGTH)})
        return out
    a, b = _counted(graph, dims(graph)), _counted(twin, dims(twin))
    if a == b:
        return None
    hint = ""
    if a[1] == b[1] and a[0] < b[0]:
        hint = ("; the FLOPs agree, and fewer stored parameters is what an exporter that merges byte-identical "
                "initializers gives (torch.onnx does, for a freshly initialised model's equal biases and norm "
                "weights): export trained or perturbed weights")
    return (f"the rebuilt model has {b[0]:,} parameters and {b[1]:,} matmul/attention FLOPs at batch {batch} "
            f"x {seq} tokens; the graph has {a[0]:,} and {a[1]:,}{hint}")
