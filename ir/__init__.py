"""narrowpipe's graph IR: typed dataflow graphs over a canonical op set, free of torch and onnx."""

from .attention import (
                        CAUSAL,
                        V_IN_K,
                        WINDOW,
                        AttentionDims,
                        attention_dims,
                        attention_operands,
                        attention_window,
                        is_causal,
)
from .dims import Dim, Shape, Sym
from .dtypes import DType
from .graph import DimSpec, Graph, Node, Placement, Source, Use, Value, ValueKind, node_subgraphs
from .nx import to_networkx
from .ops import (
    GROUP,
    IN_PLACE,
    MAJORS,
    OPERAND_MAJOR,
    STRIDED_VIEW,
    TRANSCENDENTAL_OPS,
    VIEW_OPS,
    Op,
    OpGroup,
    ops_in_group,
)
from .passes import (
                        ALL,
                        AnalysisManager,
                        Pass,
                        PassResult,
                        Pipeline,
                        get_pass,
                        parse_pipeline,
                        register_analysis,
                        register_pass,
                        registered_analyses,
                        registered_passes,
                        run_passes,
)
from .printer import format_graph
from .roles import DimRole
from .serialize import from_json, graph_from_dict, graph_to_dict, load_json, save_json, to_json
from .shapes import format_shape
from .types import TensorType
from .verifier import maybe_verify, problems, verify, verify_enabled
from .verify_pass import verify_pass

__all__ = [
    "CAUSAL", "V_IN_K", "WINDOW", "AttentionDims", "attention_dims", "attention_operands", "attention_window",
    "is_causal",
    "Dim", "Shape", "Sym", "DimRole", "format_shape", "DType", "DimSpec", "Graph", "Node", "Placement", "Source",
    "Use", "Value", "ValueKind", "node_subgraphs", "to_networkx", "GROUP", "IN_PLACE", "MAJORS", "OPERAND_MAJOR",
    "STRIDED_VIEW",
    "TRANSCENDENTAL_OPS", "VIEW_OPS",
    "Op", "OpGroup", "ops_in_group", "ALL", "AnalysisManager", "Pass", "PassResult", "Pipeline",
    "get_pass", "parse_pipeline", "register_analysis", "register_pass", "registered_analyses",
    "registered_passes", "run_passes", "format_graph", "from_json", "graph_from_dict",
    "graph_to_dict", "load_json", "save_json", "to_json", "TensorType", "problems", "verify",
    "maybe_verify", "verify_enabled", "verify_pass",
]
