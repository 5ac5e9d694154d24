"""The HTML page, opened in a real headless Chromium: the targets table has every target, every plot
decodes, and the inline script sorts, filters and switches targets. Also: it needs no network."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.models.examples import load_example
from narrowpipe.render.html import html_page

TARGETS = ("h100-sxm", "groq-lpu", "tpu-v5e")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: .ci/run installs the Debian package")
    pytest.skip("chromium not installed (apt-get install chromium)")


def rendered_dom(page: Path, fragment: str, tmp: Path) -> str:
    """The DOM after the page's scripts ran and its images loaded (Chromium dumps it after load)."""
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--dump-dom", page.resolve().as_uri() + fragment]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


class Dom(HTMLParser):
    """What the checks read back from the dumped DOM: body attributes, images, and each table's rows
    (with their tbody's attributes and their cells' sort values)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.body: dict[str, str | None] = {}
        self.images: list[dict[str, str | None]] = []
        self.rows: dict[str, list[dict]] = {}
        self._table: list[str] = []
        self._tbody: dict[str, str | None] | None = None     # None outside a tbody (header rows)
        self._row: dict | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "img":
            self.images.append(a)
        elif tag == "table":
            self._table.append(a.get("id") or "")
        elif tag == "tbody":
            self._tbody = a
        elif tag == "tr" and self._table and self._tbody is not None:
            self._row = {"attrs": a, "tbody": self._tbody, "cells": []}
            self.rows.setdefault(self._table[-1], []).append(self._row)
        elif tag == "td" and self._row is not None:
            self._row["cells"].append(a.get("data-v"))

    def handle_endtag(self, tag):
        if tag == "table" and self._table:
            self._table.pop()
        elif tag == "tbody":
            self._tbody = None
        elif tag == "tr":
            self._row = None


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "cmp.html"
    assert main(["-q", "compare", "gpt2", "--targets", ",".join(TARGETS), "--set", "seq=64", "--html", str(out)]) == 0
    return out


def test_chromium_shows_a_row_per_target_and_every_plot(page, tmp_path):
    dom = Dom(rendered_dom(page, "", tmp_path))
    assert dom.body.get("data-ready") == "1"                    # the inline script ran to its end
    assert [r["attrs"]["data-target"] for r in dom.rows["targets"]] == list(TARGETS)
    plots = [i for i in dom.images if (i.get("src") or "").startswith("data:image/png;base64,")]
    assert len(plots) == len(TARGETS)
    assert all(int(i.get("data-width") or 0) > 500 for i in plots)   # decoded by the browser, not broken
    ops = dom.rows["ops-table"]
    assert {r["tbody"]["data-target-view"] for r in ops} == set(TARGETS)
    shown = {r["tbody"]["data-target-view"] for r in ops if "hidden" not in r["tbody"]}
    assert shown == {TARGETS[0]}                                 # one target's ops at a time


def test_chromium_applies_sort_filter_and_target_from_the_link(page, tmp_path):
    dom = Dom(rendered_dom(page, "#target=groq-lpu&sort=time&desc=1&filter=mlp", tmp_path))
    groq = [r for r in dom.rows["ops-table"] if r["tbody"]["data-target-view"] == "groq-lpu"]
    assert "hidden" not in groq[0]["tbody"]
    times = [float(r["cells"][8]) for r in groq]                 # column 9 is the time, in seconds
    assert times == sorted(times, reverse=True) and times[0] > 0
    report = narrowpipe.compare(load_example("gpt2"), ["groq-lpu"], dims={"seq": 64}).reports[0]
    assert times[0] == pytest.approx(max(o.time_s or 0 for o in report.ops))
    visible = [r for r in groq if "hidden" not in r["attrs"]]
    assert 0 < len(visible) < len(groq)                          # the filter hid the rows without "mlp"


def test_page_is_self_contained_and_lists_unmodeled_ops(page):
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)   # nothing fetched from a network
    assert "<link" not in text and "<script src" not in text
    untimed = html_page(narrowpipe.analyze(load_example("gpt2"), dims={"seq": 8}))
    assert "No target: counts only" in untimed and 'id="ops-table"' in untimed and "<img" not in untimed


def test_a_huge_graph_lists_its_slowest_ops_and_says_how_many_are_not(monkeypatch):
    import narrowpipe.render.html as html
    monkeypatch.setattr(html, "MAX_OP_ROWS", 10)
    report = narrowpipe.analyze(load_example("gpt2"), "h100", dims={"seq": 8})
    text = html.html_page(report)
    body = text[text.index('id="ops-table"'):text.index("</table>", text.index('id="ops-table"'))]
    assert body.count("<tr>") == 10 + 1                  # and the header row
    listed = sum(1 for o in report.ops if o.flops or o.bytes or o.comm_bytes or o.time_s or not o.modeled)
    assert f"{listed - 10} beyond the 10 slowest" in text
    slowest = max(report.ops, key=lambda o: o.time_s or 0)
    assert f"<td>{slowest.name}</td>" in body
