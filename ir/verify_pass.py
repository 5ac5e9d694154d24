"""The verifier as a pass, so a pipeline can check the graph at any point: ``"precision{...},verify"``.

Kept apart from :mod:`.verifier` because the pass manager itself imports the verifier (to check
after every pass under ``NARROWPIPE_VERIFY``), and a registration there would close a cycle.
"""

from __future__ import annotations

from .graph import Graph
from .passes import ALL, AnalysisManager, PassResult, register_pass
from .verifier import verify

__all__ = ["verify_pass"]


@register_pass("verify")
def verify_pass(graph: Graph, am: AnalysisManager) -> PassResult:
    """Raise on any broken invariant; the graph is unchanged, so every analysis stays valid."""
    verify(graph, after="the verify pass")
    return PassResult(graph, ALL)
