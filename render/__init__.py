"""Rendering of results for people: rich tables (imported here), and, imported where used because
they pull in matplotlib or are only needed on request, roofline plots (:mod:`.roofline`), Chrome /
Perfetto traces (:mod:`.trace`; a training plan's step: :mod:`.plan_trace`), the self-contained HTML
page (:mod:`.html`), terminal progress (:mod:`.progress`) and launch settings for deployment tools
(:mod:`.emit`: Megatron-LM, PyTorch, JAX from a training plan, vLLM from a serving deployment).

Everything here reads only result types (:class:`~narrowpipe.costmodel.report.Report` and friends).
"""

from .comparison import comparison_table, print_comparison, print_whatif, timing_summary
from .tables import node_table, op_type_table, print_report, report_summary, unmodeled_table
from .units import count, flops, nbytes, percent, seconds, si

__all__ = ["comparison_table", "print_comparison", "print_whatif", "timing_summary", "node_table", "op_type_table",
           "print_report", "report_summary", "unmodeled_table", "count", "flops", "nbytes", "percent", "seconds", "si"]
