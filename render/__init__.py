"""Rendering of results for people (tables now; plots, traces and plan files later).

Everything here reads only result types (:class:`~narrowpipe.costmodel.report.Report` and friends).
"""

from .comparison import comparison_table, print_comparison, print_whatif, timing_summary
from .tables import node_table, op_type_table, print_report, report_summary, unmodeled_table
from .units import count, flops, nbytes, percent, seconds, si

__all__ = ["comparison_table", "print_comparison", "print_whatif", "timing_summary", "node_table", "op_type_table",
           "print_report", "report_summary", "unmodeled_table", "count", "flops", "nbytes", "percent", "seconds", "si"]
