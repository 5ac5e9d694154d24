"""A stage chunk's ``forward_s``/``backward_s`` already include its ``forward_comm_s``/``backward_comm_s``
(QA qa95 finding 6: the JSON put them side by side and adding them double-counted; the schema and README
now say so). QA's reconciliation of Llama-3-8B tp4 pp2: 32 x (forward + backward) = 1.738 s = compute
1.313 + tp_comm 0.424. The same identity here, on the busiest (last) stage of a tp4 pp2 plan without
recomputation: m x (forward_s + backward_s) = compute + tp_comm, and m x (the comm fields) = tp_comm.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import narrowpipe

SCHEMA = Path(__file__).resolve().parents[3] / "schema" / "narrowpipe.schema.json"


def test_chunk_times_are_whole_passes():
    g = narrowpipe.transformer(4, 1024, 16, 1000, ffn=4096, seq=512, name="tiny")
    p = narrowpipe.plan(g, "dgx-h100", 8, global_batch=16, seq=512, top=0,
                        parallel={"tp": 4, "pp": 2, "microbatch": 1, "interleave": 1, "sequence_parallel": True,
                                  "recompute": "none", "zero": 1})
    m, b = p.parallel.microbatches, p.breakdown
    last = p.stages[-1]["chunks"][0]
    assert m == 16 and b["recompute"] == 0
    assert m * (last["forward_s"] + last["backward_s"]) == pytest.approx(b["compute"] + b["tp_comm"], rel=1e-9)
    assert m * (last["forward_comm_s"] + last["backward_comm_s"]) == pytest.approx(b["tp_comm"], rel=1e-9)
    assert 0 < last["forward_comm_s"] < last["forward_s"]


def test_the_schema_says_the_comm_is_inside():
    text = json.dumps(json.loads(SCHEMA.read_text()))
    assert "already include forward_comm_s" in text and "a part of forward_s, not in addition to it" in text
