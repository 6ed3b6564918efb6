"""The dashboard's one page: HTML, CSS and a little script, nothing fetched from elsewhere.

It polls the dashboard's JSON endpoints about once a second and redraws three
parts: the live workers (slots used of total), the newest runs (state and a
progress bar) and the selected run's timeline (the server draws the SVG, so
the page and ``somatize-tasks timeline`` show the same picture). A run is
selected by clicking it, or by ``#run=<id>`` in the address. Text from the
server goes in with ``textContent``, never as markup, except the SVG the
server itself drew and escaped.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>somatize-tasks dashboard</title>
<style>
body{margin:20px 24px;color:#24292f;
 font:14px system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:22px 0 8px}
#updated{color:#5b6470;font-size:12px}
#updated.error{color:#d64541;font-weight:600}
table{border-collapse:collapse;font-size:13px}
td,th{padding:4px 12px;border-bottom:1px solid #e3e7ec;text-align:left;vertical-align:middle}
th{color:#5b6470;font-weight:600}
tr[data-run]{cursor:pointer} tr[data-run]:hover{background:#f6f8fa}
tr.selected{background:#eaf2fc}
.slots{display:inline-block;width:90px;height:8px;background:#e3e7ec;border-radius:4px;
 vertical-align:middle;margin-right:6px;overflow:hidden}
.slots i{display:block;height:100%;background:#2f7fd8}
.state{font-weight:600} .s-done{color:#2e9d5b} .s-running{color:#2f7fd8}
.s-failed{color:#d64541} .s-cancelled{color:#e59a26}
progress{width:120px;vertical-align:middle;margin-right:6px}
.error{color:#d64541;max-width:480px}
.failure{border:1px solid #d64541;background:#fdf1f1;color:#8e1f1c;padding:8px 12px;
 border-radius:6px;margin:8px 0;font-size:13px}
.empty{color:#8a939d}
#timeline{overflow-x:auto;border:1px solid #e3e7ec;border-radius:6px;margin-top:8px}
</style></head>
<body>
<h1>somatize-tasks</h1><div id="updated">connecting…</div>
<h2>Workers</h2>
<table id="workers"><thead><tr><th>worker</th><th>tags</th><th>gpu</th><th>slots used</th>
<th>last seen</th></tr></thead><tbody></tbody></table>
<h2>Runs</h2>
<table id="runs"><thead><tr><th>run</th><th>state</th><th>progress</th><th>started</th>
<th>error</th></tr></thead><tbody></tbody></table>
<h2 id="run-title">Run</h2>
<div id="run-error"></div>
<div id="timeline" class="empty">click a run to see its live timeline</div>
<script>
"use strict";
const $ = (sel) => document.querySelector(sel);
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function selected() {
  const m = location.hash.match(/run=([^&]+)/);
  return m ? decodeURIComponent(m[1]) : null;
}
function ago(t) {
  const s = Math.max(0, Date.now() / 1000 - t);
  return s < 60 ? s.toFixed(0) + " s ago" : s < 3600 ? (s / 60).toFixed(0) + " min ago"
    : (s / 3600).toFixed(1) + " h ago";
}
function errorText(e) {
  return e ? "node " + e.node_id + " on " + e.worker_id + ": " + e.type + ": " + e.message : "";
}
async function getJSON(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) {
    let said = null;
    try { said = (await r.json()).error; } catch (e) { said = null; }
    const err = new Error(said || (path + ": " + r.status + " " + r.statusText));
    err.fromServer = true;
    throw err;
  }
  return r.json();
}
function drawWorkers(workers) {
  const body = $("#workers tbody");
  body.replaceChildren();
  if (!workers.length) {
    const tr = body.insertRow(); cell(tr, "no live worker", "empty").colSpan = 5; return;
  }
  for (const w of workers) {
    const tr = body.insertRow();
    tr.dataset.worker = w.id;
    cell(tr, w.id); cell(tr, (w.tags || []).join(", ") || "-"); cell(tr, w.gpu ? "yes" : "no");
    const td = cell(tr, "");
    const bar = document.createElement("span"); bar.className = "slots";
    const fill = document.createElement("i");
    fill.style.width = (100 * w.active_jobs / Math.max(1, w.max_concurrent)) + "%";
    bar.appendChild(fill); td.appendChild(bar);
    td.appendChild(document.createTextNode(w.active_jobs + "/" + w.max_concurrent));
    td.className = "slots-cell";
    cell(tr, w.age_s + " s ago");
  }
}
function drawRuns(runs) {
  const body = $("#runs tbody");
  body.replaceChildren();
  if (!runs.length) {
    const tr = body.insertRow(); cell(tr, "no run yet", "empty").colSpan = 5; return;
  }
  for (const r of runs) {
    const tr = body.insertRow();
    tr.dataset.run = r.run_id; tr.dataset.state = r.state;
    if (r.run_id === selected()) tr.className = "selected";
    tr.onclick = () => { location.hash = "run=" + encodeURIComponent(r.run_id); refresh(); };
    cell(tr, r.run_id);
    cell(tr, r.state, "state s-" + r.state);
    const td = cell(tr, "");
    const p = document.createElement("progress");
    p.max = Math.max(1, r.total); p.value = r.done;
    td.appendChild(p); td.appendChild(document.createTextNode(r.done + "/" + r.total));
    td.className = "progress";
    cell(tr, ago(r.created_at));
    cell(tr, errorText(r.error), "error");
  }
}
async function drawRun(runId) {
  if (!runId) return;
  const run = await getJSON("/api/runs/" + encodeURIComponent(runId));
  $("#run-title").textContent = "Run " + run.run_id + ": " + run.state + " (" + run.done +
    "/" + run.total + " nodes)";
  const box = $("#run-error");
  box.replaceChildren();
  if (run.error) {
    const div = document.createElement("div"); div.className = "failure";
    div.textContent = errorText(run.error); box.appendChild(div);
  }
  const r = await fetch("/api/runs/" + encodeURIComponent(runId) + "/timeline.svg",
                        {cache: "no-store"});
  if (!r.ok) return;
  const svg = (await r.text()).replace(/^<\\?xml[^>]*>\\s*/, "");
  const holder = $("#timeline");
  holder.className = ""; holder.dataset.run = runId;
  holder.innerHTML = svg;  // drawn and escaped by the server
}
let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [workers, runs] = await Promise.all([getJSON("/api/workers"), getJSON("/api/runs")]);
    drawWorkers(workers); drawRuns(runs);
    await drawRun(selected());
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    $("#updated").className = "";
  } catch (e) {
    $("#updated").textContent = e.fromServer ? e.message
      : "cannot reach the dashboard server: " + e.message;
    $("#updated").className = "error";
  } finally { busy = false; }
}
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, 1000);
</script>
</body></html>
"""
