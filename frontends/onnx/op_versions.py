"""Whether each node's op exists in the opset the model imports for its domain.

Why: a node the imported opset does not define (``Gelu`` in an opset-17 model: Gelu came in opset
20) is a file that ``onnx.checker`` and onnxruntime reject; analysing it anyway would cost a model
that cannot run. Only the domains ``onnx.defs`` defines are checked (``ai.onnx``, ``ai.onnx.ml``,
the training and preview domains); custom and contrib domains (``com.microsoft``) have no schemas
here, and the model's own functions define their ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

import onnx

from ...errors import FrontendError

__all__ = ["check_op_versions", "ORT_ONNX_DOMAIN"]


#: Ops onnxruntime registers in the ONNX domain though ``onnx.defs`` has no schema for them (its
#: ``contrib_defs.cc`` declares SimplifiedLayerNormalization under ``kOnnxDomain``, version 1; GenAI's
#: model builder writes it there): real files, so accepted.
ORT_ONNX_DOMAIN = {("", "SimplifiedLayerNormalization"): 1}


@lru_cache(maxsize=1)
def _first_versions() -> dict[tuple[str, str], int]:
    """(domain, op type) -> the opset version that introduced it, from every schema's history."""
    out: dict[tuple[str, str], int] = dict(ORT_ONNX_DOMAIN)
    for s in onnx.defs.get_all_schemas_with_history():
        key = ("" if s.domain == "ai.onnx" else s.domain, s.name)
        out[key] = min(out.get(key, s.since_version), s.since_version)
    return out


@lru_cache(maxsize=1)
def _schema_domains() -> frozenset[str]:
    return frozenset(onnx.defs.C.schema_version_map())


def check_op_versions(nodes: Iterable[tuple[str, str, str]], opsets: Mapping[str, int],
                      local: set[tuple[str, str]], file: str) -> None:
    """Raise a :class:`FrontendError` naming the file, node, op and both versions for the first node
    (op type, domain, name) whose op its domain's imported opset does not define."""
    first = _first_versions()
    domains = _schema_domains()
    seen: set[tuple[str, str]] = set()
    for op_type, domain, name in nodes:
        if (domain, op_type) in seen or (domain, op_type) in local or domain not in domains or domain not in opsets:
            continue
        seen.add((domain, op_type))
        label = domain or "ai.onnx"
        since = first.get((domain, op_type))
        version = opsets[domain]
        if since is None:
            raise FrontendError(f"{op_type} is not an {label} operator (opset {version})", file=file or None,
                                node=name or op_type, op=f"{label}::{op_type}")
        if since > version:
            raise FrontendError(f"{op_type} first appears in {label} opset {since}, but the model imports "
                                f"opset {version} (onnx.checker and onnxruntime reject it)", file=file or None,
                                node=name or op_type, op=f"{label}::{op_type}")
