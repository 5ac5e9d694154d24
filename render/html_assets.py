"""The inline style and script of the HTML report: the page must open with no network at all.

The script is small vanilla JavaScript: click a header to sort a table (numbers by their exact
value, held in ``data-v``), type in the filter box to hide the op rows that do not match, pick a
target to show its ops and roofline. The page state also reads from the URL fragment
(``#target=h100-sxm&filter=mlp&sort=time&desc=1``), so a link can point at a view. When it has
set up, it marks ``<body data-ready>``, and each inlined plot records its decoded width
(``data-width``): what the headless-browser test reads back.
"""

from __future__ import annotations

__all__ = ["STYLE", "SCRIPT"]

STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.5em; margin: 0 0 .2em; } h2 { font-size: 1.15em; margin: 1.6em 0 .5em; }
.muted { color: #666; } .warn { color: #a35f00; } .bad { color: #b00020; } .good { color: #1b7a2f; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e3e3e3; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; white-space: nowrap; }
th { background: #f4f4f4; position: sticky; top: 0; cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort="ascending"]::after { content: " \\25B2"; } th[aria-sort="descending"]::after { content: " \\25BC"; }
tr.fastest td:first-child { font-weight: 600; }
.controls { margin: .4em 0 .6em; display: flex; gap: 1em; align-items: center; flex-wrap: wrap; }
input[type=search] { padding: 3px 6px; min-width: 18em; }
figure { margin: 0 0 1em; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.scroll { max-height: 70vh; overflow: auto; border: 1px solid #e3e3e3; }
dl.totals { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: .5em 0; }
dl.totals dt { font-weight: 600; } dl.totals dd { margin: 0; }
ul.notes li { margin: .15em 0; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  function cellValue(row, i) {
    var c = row.cells[i];
    if (!c) return "";
    var v = c.getAttribute("data-v");
    if (v !== null && v !== "") { var f = parseFloat(v); if (!isNaN(f)) return f; }
    return c.textContent.trim().toLowerCase();
  }
  function sortTable(table, col, desc) {
    var heads = table.tHead.rows[0].cells;
    for (var h = 0; h < heads.length; h++) heads[h].removeAttribute("aria-sort");
    heads[col].setAttribute("aria-sort", desc ? "descending" : "ascending");
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = cellValue(a, col), y = cellValue(b, col);
        if (typeof x !== typeof y) { x = String(x); y = String(y); }
        var r = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -r : r;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  }
  function columnIndex(table, key) {
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) if (heads[i].getAttribute("data-key") === key) return i;
    return -1;
  }
  function visibleBody(table) {
    for (var i = 0; i < table.tBodies.length; i++) if (!table.tBodies[i].hidden) return table.tBodies[i];
    return null;
  }
  function applyFilter(table, text, counter) {
    var words = text.toLowerCase().split(/\s+/).filter(Boolean);
    var body = visibleBody(table), shown = 0, total = 0;
    if (!body) return;
    Array.prototype.forEach.call(body.rows, function (row) {
      var hay = row.textContent.toLowerCase();
      var ok = words.every(function (w) { return hay.indexOf(w) >= 0; });
      row.hidden = !ok; total++; if (ok) shown++;
    });
    if (counter) counter.textContent = shown + " of " + total + " rows";
  }
  function showTarget(name) {
    document.querySelectorAll("[data-target-view]").forEach(function (el) {
      el.hidden = el.getAttribute("data-target-view") !== name;
    });
  }
  function params() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var p = kv.split("=");
      out[decodeURIComponent(p[0])] = decodeURIComponent(p.slice(1).join("=") || "");
    });
    return out;
  }
  document.querySelectorAll("figure img").forEach(function (img) {
    function mark() { img.setAttribute("data-width", String(img.naturalWidth)); }
    if (img.complete) mark(); else img.addEventListener("load", mark);
  });
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.addEventListener("click", function () {
        sortTable(table, i, th.getAttribute("aria-sort") === "ascending");
      });
    });
  });
  var ops = document.getElementById("ops-table");
  var filter = document.getElementById("op-filter");
  var counter = document.getElementById("op-count");
  var select = document.getElementById("target-select");
  var p = params();
  if (select) {
    if (p.target) select.value = p.target;
    showTarget(select.value);
    select.addEventListener("change", function () {
      showTarget(select.value);
      if (ops) applyFilter(ops, filter ? filter.value : "", counter);
    });
  }
  if (ops && p.sort) {
    var col = columnIndex(ops, p.sort);
    if (col >= 0) sortTable(ops, col, p.desc === "1");
  }
  if (filter && ops) {
    if (p.filter) filter.value = p.filter;
    filter.addEventListener("input", function () { applyFilter(ops, filter.value, counter); });
    applyFilter(ops, filter.value, counter);
  }
  document.body.setAttribute("data-ready", "1");
})();
"""
