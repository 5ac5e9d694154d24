"""Serving results for people: one deployment's figures, a capacity plan, a batch x context table.

Reads only the serving result types (:class:`~narrowpipe.costmodel.serving.ServingReport`,
:class:`~narrowpipe.costmodel.serving.capacity.CapacityPlan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .units import dollars, nbytes, seconds, si

if TYPE_CHECKING:
    from ..costmodel.serving import ServingReport
    from ..costmodel.serving.capacity import CapacityPlan

__all__ = ["print_serving", "print_capacity", "print_serving_sweep"]



def _max_batch_text(batch: int) -> str:
    """The largest batch that fits, or ``>= N (search cap)`` where the search stopped before memory
    did (a dataflow layout adds chips for its KV cache)."""
    from ..costmodel.serving.replica import BATCH_SEARCH_LIMIT
    return f">= {batch:,} (search cap)" if batch >= BATCH_SEARCH_LIMIT else str(batch)

def _rate(x: float | None, unit: str = "tok/s") -> str:
    """Whole tokens per second, three significant digits below 100 (a 616-chip Groq deployment's
    0.32 tok/s per device printed "0 tok/s")."""
    if not x:
        return "-"
    return f"{x:,.0f} {unit}" if x >= 100 else f"{x:.3g} {unit}"


def _money(x: float | None) -> str:
    return "-" if x is None else dollars(x)


def print_serving(r: ServingReport, console: Console) -> None:
    t = Table(title=f"{escape(r.model)} on {r.target}: {r.mode}, {r.layout}", show_header=False, box=None,
              title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("batch x context", f"{r.batch} x {r.context}" + (f" (in {r.input_len}, out {r.output_len})"
                                                                if r.mode == "generate" else ""))
    t.add_row("formats", ", ".join(f"{k} {v}" for k, v in r.formats.items() if v) or "the model's own")
    if r.ttft_s is not None:
        t.add_row("time to first token", seconds(r.ttft_s))
    if r.tpot_s is not None:
        t.add_row("time per output token", seconds(r.tpot_s) + (f" ({r.bound}-bound)" if r.mode != "prefill" else ""))
    elif r.mode == "generate":
        t.add_row("time per output token", "n/a (no decode step: the prefill gives the one token)")
    if r.e2e_s is not None:
        t.add_row("end to end", seconds(r.e2e_s))
    if r.output_tokens_per_s:
        t.add_row("output tokens/s", f"{_rate(r.output_tokens_per_s)} ({_rate(r.tokens_per_s_per_device)} per device, "
                                     f"{r.devices} device{'s' if r.devices > 1 else ''})")
    if r.prompt_tokens_per_s:
        t.add_row("prompt tokens/s", f"{_rate(r.prompt_tokens_per_s)} ({r.bound}-bound)")
    # per device as the memory line is; a dataflow layout's chips each hold their layers' cache, so its
    # figure is the model's averaged over them (a note gives the model's)
    dataflow = r.layout.startswith("dataflow")
    where = " (per chip: the model's, averaged over the layout's chips)" if dataflow else " (per device)"
    t.add_row("KV cache", _kv_text(r) + where)
    t.add_row("memory", escape(r.memory.explain()) + (" (averaged over the layout's chips)" if dataflow else ""),
              style=None if r.fits else "bold red")
    t.add_row("largest batch that fits", _max_batch_text(r.max_batch))
    if r.crossover is not None:
        t.add_row("crossover", _crossing(r.crossover) + _label_beside_crossing(r))
    if r.cost_per_million_tokens is not None:
        t.add_row("cost", f"{_money(r.cost_per_million_tokens)} per million tokens")
    elif r.price_per_hour is not None and not r.fits:
        t.add_row("cost", "none: it does not fit (memory above), so it serves no tokens")
    console.print(t)
    for n in r.notes:
        console.print(f"  note: {escape(n)}", highlight=False)


def print_capacity(plan: CapacityPlan, console: Console) -> None:
    ttft = f", TTFT <= {seconds(plan.ttft_target_s)}" if plan.ttft_target_s else ""
    targets = sorted({c.target for c in plan.candidates})
    on = f" on {targets[0]}" if len(targets) == 1 else ""
    tab = Table(title=f"{escape(plan.model)}{on}: {plan.rate:,g} req/s of {plan.input_len} in / {plan.output_len} "
                      f"out, TPOT <= {seconds(plan.tpot_target_s)}{ttft}", box=box.SIMPLE_HEAD,
                title_justify="left", pad_edge=False, collapse_padding=True)
    priced = any(c.fleet_price_per_hour is not None for c in plan.candidates)
    money = ("$/h", "$/M") if priced else ("$/M tok",)
    for col in ("layout", "batch", "TPOT", "TTFT", "tok/s/dev", "chips", *money, "limit"):
        tab.add_column(col, justify="left" if col in ("layout", "limit") else "right", no_wrap=True)
    missed: list[str] = []
    for c in plan.candidates:
        layout = c.layout.replace("dataflow layout (", "x").replace(" chips)", "")
        layout = f"{c.target} {layout}" if len(targets) > 1 else layout
        if not c.meets:
            missed.append(f"{c.target} {c.layout}: {c.why_not}")
            tab.add_row(layout, "-", seconds(c.tpot_s), seconds(c.ttft_s), "-", "-", *("-" for _ in money),
                        f"[{len(missed)}]", style="dim")
            continue
        costs = (c.fleet_price_per_hour, c.cost_per_million_tokens_at_rate) if priced else (c.cost_per_million_tokens,)
        tab.add_row(layout, str(c.batch), seconds(c.tpot_s), seconds(c.ttft_s), f"{c.tokens_per_s_per_device:,.0f}",
                    str(c.total_devices), *(_money(x) for x in costs), c.limited_by.replace("memory", "mem"))
    console.print(tab)
    if priced:
        console.print("  $/h: the fleet the rate needs (chips x price); $/M: per million output tokens at the "
                      "rate (at full batches: the answer's line, and the JSON's cost_per_million_tokens)",
                      highlight=False)
    for i, why in enumerate(missed, 1):
        console.print(f"  [{i}] {escape(why)}", highlight=False)
    best, cheap, fast = plan.best_throughput, plan.cheapest, plan.best_latency
    if best is None:
        console.print(f"[bold red]no layout meets the targets[/]; {escape(plan.why_none())}")
    else:
        replicas = f"{best.replicas} replica{'s' if best.replicas > 1 else ''}"
        console.print(f"[bold]answer:[/] {best.total_devices} x {best.target} ({replicas} of {best.layout}, "
                      f"batch {best.batch} each) for {plan.rate:,g} requests/s{_fleet(best)}")
        console.print(f"  throughput: {best.target} {best.layout} "
                      f"({_rate(best.tokens_per_s_per_device)} per device; fewest devices for the rate)")
        if cheap is not None and cheap is not best:
            console.print(f"  cheapest: {cheap.total_devices} x {cheap.target} ({cheap.layout}){_fleet(cheap)}")
        if plan.unpriced and cheap is not None:
            console.print(f"  left out of cheapest (no price; --price NAME=USD_PER_HOUR): {', '.join(plan.unpriced)}",
                          highlight=False)
    if fast is not None:
        console.print(f"  latency: {fast.target} {fast.layout} (TPOT {seconds(fast.min_tpot_s)} at batch 1)")
    for n in plan.notes:
        console.print(f"  note: {escape(n)}", highlight=False)


def _fleet(c: Any) -> str:
    """The fleet's $/h and its $ per million output tokens at the requested rate (the full-batch
    figure beside it: rounded-up replicas idle part of the time), or nothing unpriced."""
    if c.fleet_price_per_hour is None:
        return ""
    return (f": {_money(c.fleet_price_per_hour)}/h, {_money(c.cost_per_million_tokens_at_rate)}/M tok at this rate "
            f"({_money(c.cost_per_million_tokens)}/M at full batches)")


def print_serving_sweep(reports: list[ServingReport], console: Console) -> None:
    if not reports:
        return
    r0 = reports[0]
    # a dataflow layout grows with the KV cache: one layout in the title only when every row has it
    same = all(r.layout == r0.layout for r in reports)
    where = r0.layout if same else "the layout of each row (devices)"
    tab = Table(title=f"{escape(r0.model)} decode on {r0.target}, {where}", box=box.SIMPLE_HEAD,
                title_justify="left", pad_edge=False, collapse_padding=True)
    priced = any(r.price_per_hour is not None for r in reports)
    heads = ("batch", "context", *(() if same else ("devices",)), "TPOT", "tok/s", "tok/s/dev",
             *(("$/M",) if priced else ()), "bound", "KV/dev", "fits")
    for col in heads:
        tab.add_column(col, justify="left" if col in ("bound", "fits") else "right", no_wrap=True)
    # what overflows goes below the table, by number: in the cell, 80 columns cut "no: KV +26.3 GB" to
    # "no: KV +26… GB" (70B on TP8 at batch 256 and 8,191 tokens), losing the figure it was there for
    over: list[str] = []
    for r in reports:
        if not r.memory.fits:
            over.append(f"batch {r.batch}, context {r.context}: {r.memory.short()}")
        fits = "yes" if r.memory.fits else f"no [{len(over)}]"
        tab.add_row(str(r.batch), str(r.context), *(() if same else (str(r.devices),)), seconds(r.tpot_s),
                    si(r.output_tokens_per_s or 0.0), si(r.tokens_per_s_per_device or 0.0),
                    *((_money(r.cost_per_million_tokens),) if priced else ()), r.bound,
                    nbytes(r.memory.kv_cache), fits, style=None if r.fits else "red")
    console.print(tab)
    for i, why in enumerate(over, 1):
        console.print(f"  [{i}] {escape(why)}", highlight=False)
    if any(r.layout.startswith("dataflow") for r in reports):
        console.print("  KV/dev on a dataflow layout: the model's KV cache averaged over its chips", highlight=False)
    seen: set[int | None] = set()
    for r in reports:
        if r.context in seen:
            continue
        seen.add(r.context)
        line = f"  context {r.context}: largest batch that fits {_max_batch_text(r.max_batch)}"
        c = r.crossover
        if c is not None:
            line += "; " + _crossing(c)
        console.print(line, highlight=False)



def _label_beside_crossing(r: ServingReport) -> str:
    """Where the step's label and the crossover's sums disagree, say why both hold: the label is
    the bound of the kernels that hold most of the time, the crossover compares the step's summed
    compute and memory terms (a TPU decode at batch 64 read "compute-bound", its MXU-padded
    attention kernels, beside "compute terms pass memory terms at batch 180")."""
    step = r.decode
    if r.mode == "prefill" or r.crossover is None or step is None:
        return ""
    summed_compute = step.compute_s >= step.memory_s
    if r.bound == "compute" and not summed_compute:
        return (f"; at batch {r.batch:,} compute-bound kernels already hold most of the step (the TPOT label), "
                "while its summed memory terms still lead")
    if r.bound == "memory" and summed_compute:
        return (f"; at batch {r.batch:,} memory-bound kernels still hold most of the step (the TPOT label), "
                "while its summed compute terms lead")
    return ""


def _kv_text(r: ServingReport) -> str:
    """The cache's rate per token, and where sliding windows cap it, what a sequence holds: a windowed
    layer stops growing at its window, so every layer's rate (Gemma-3-27B's 508 kB) holds only until
    the windows fill (at 32k tokens a sequence holds 3.12 GB, 95 kB a token)."""
    rate = f"{nbytes(r.kv_bytes_per_token)} per token per sequence"
    tokens = r.kv_tokens
    if not tokens or r.kv_bytes_per_sequence >= r.kv_bytes_per_token * tokens:
        return rate
    return (f"{rate} until the sliding windows fill; {nbytes(r.kv_bytes_per_sequence)} per sequence at "
            f"{tokens:,} tokens ({nbytes(r.kv_bytes_per_sequence / tokens)} per token on average)")


def _crossing(c: Any) -> str:
    """The crossover line: the roofline's answer (from the ridge point), and the execution model's
    first batch whose compute terms pass its memory terms, which can exist where the roofline says
    there is none (tile padding, attention work the ridge's FLOP/B does not see). A step's own
    label ("compute-bound") is the bound holding most of its time, which can come earlier
    (:func:`_label_beside_crossing` says so where it does)."""
    modelled = (f"; in the execution model the step's compute terms pass its memory terms at batch "
                f"{c.modelled:,}") if c.modelled else ""
    if c.analytic is None:
        return f"by the roofline, KV reads keep decode memory-bound at any batch (ridge {c.ridge:.0f} FLOP/B){modelled}"
    return f"by the roofline, compute-bound from batch {c.analytic:,.0f} (ridge {c.ridge:.0f} FLOP/B){modelled}"
