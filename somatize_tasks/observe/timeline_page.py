"""The timeline as a page: the SVG, the run's error, then the node, attempt and transfer tables.

Self-contained (no script, no fonts or styles fetched), so it opens from a
file anywhere. ``write_timeline`` picks SVG or HTML from the file suffix.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from somatize_tasks.observe.timeline import bars_of, not_run, timeline_svg
from somatize_tasks.observe.timeline_draw import STATE_COLOURS, fmt_bytes, fmt_s, transfer_words
from somatize_tasks.runtime.producer.handle import NodeStatus, RunStatus


def _dot(state: str) -> str:
    return f"<span class='dot' style='background:{STATE_COLOURS.get(state, '#9aa3ad')}'></span>"


def _node_rows(status: RunStatus, t0: float, marks: dict[str, str]) -> str:
    def cells(node_id: str, node: NodeStatus) -> str:
        state = marks.get(node_id, node.state)
        start = f"+{fmt_s(node.started_at - t0)}" if node.started_at else ""
        took = fmt_s(node.ended_at - node.started_at) if node.started_at and node.ended_at else ""
        error = f"<td class='error'>{escape(node.error)}</td>" if node.error else "<td></td>"
        return (
            f"<tr><td>{escape(node_id)}</td><td>{_dot(state)}{escape(state)}</td>"
            f"<td>{escape(node.worker or '')}</td><td>{start}</td><td>{took}</td>"
            f"{error}</tr>"
        )

    return "\n".join(cells(n, s) for n, s in status.nodes.items())


def _attempt_rows(status: RunStatus, history: list[dict[str, Any]], t0: float) -> str:
    """Only when some node ran more than once (a retry, a dead worker, loop passes)."""
    bars = bars_of(status, history)
    if len(bars) == len({b.node_id for b in bars}):
        return ""
    rows = "\n".join(
        f"<tr><td>{escape(b.label)}</td><td>{_dot(b.state)}{escape(b.state)}</td>"
        f"<td>{escape(b.worker)}</td><td>+{fmt_s(b.start - t0)}</td><td>{fmt_s(b.seconds)}</td>"
        f"</tr>"
        for b in sorted(bars, key=lambda b: b.start)
    )
    return (
        "<h2>Every attempt</h2><table><tr><th>node</th><th>state</th><th>worker</th>"
        f"<th>started</th><th>took</th></tr>\n{rows}\n</table>"
    )


def _how(transfer: dict[str, Any]) -> str:
    return transfer_words(transfer)


def _transfer_rows(status: RunStatus) -> str:
    return "\n".join(
        f"<tr><td>{escape(str(t.get('from_node')))} &rarr; {escape(str(t.get('to_node')))}</td>"
        f"<td>{escape(str(t.get('from_worker')))} &rarr; {escape(str(t.get('to_worker')))}</td>"
        f"<td>{escape(_how(t))}</td><td>{fmt_bytes(t.get('bytes'))}</td></tr>"
        for t in status.transfers
    )


def run_error(status: RunStatus) -> str:
    """The run's failure as a red box (empty for a run that did not fail)."""
    error = status.error
    if not error:
        return ""
    return (
        f"<div class='failure'><b>node {escape(str(error.get('node_id')))} on worker "
        f"{escape(str(error.get('worker_id')))} failed:</b> "
        f"{escape(str(error.get('type')))}: {escape(str(error.get('message')))}"
        f"<pre>{escape(str(error.get('traceback') or ''))}</pre></div>"
    )


CSS = """
body{margin:24px;color:#24292f;
 font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
h2{font-size:15px;margin:28px 0 8px}
table{border-collapse:collapse;font-size:13px}
td,th{padding:4px 12px;border-bottom:1px solid #e3e7ec;text-align:left}
th{color:#5b6470;font-weight:600}
.dot{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:6px}
.svg{overflow-x:auto}
.error{color:#d64541}
.failure{border:1px solid #d64541;background:#fdf1f1;color:#8e1f1c;padding:10px 14px;
 border-radius:6px;margin:12px 0;font-size:13px}
.failure pre{white-space:pre-wrap;font-size:11px;color:#5b2221;margin:8px 0 0}
"""


def timeline_html(
    status: RunStatus, now: float | None = None, history: list[dict[str, Any]] | None = None
) -> str:
    """A self-contained page: the SVG, the failure, then the tables."""
    svg = timeline_svg(status, now, history).split("\n", 1)[1]  # drop the XML declaration
    bars = bars_of(status, history, now)
    t0 = status.created_at or min((b.start for b in bars), default=0.0)
    marks = not_run(status, bars)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>run {escape(status.run_id)}: timeline</title>
<style>{CSS}</style></head>
<body>
{run_error(status)}
<div class="svg">{svg}</div>
<h2>Nodes</h2>
<table><tr><th>node</th><th>state</th><th>worker</th><th>started</th><th>took</th>
<th>error</th></tr>
{_node_rows(status, t0, marks)}
</table>
{_attempt_rows(status, history or [], t0)}
<h2>Transfers</h2>
<table><tr><th>value</th><th>workers</th><th>how</th><th>size</th></tr>
{_transfer_rows(status)}
</table>
</body></html>
"""


def write_timeline(
    status: RunStatus, path: Path, history: list[dict[str, Any]] | None = None
) -> None:
    """Write ``path`` as SVG (``.svg``) or HTML (anything else)."""
    text = (
        timeline_svg(status, history=history)
        if path.suffix.lower() == ".svg"
        else timeline_html(status, history=history)
    )
    path.write_text(text, encoding="utf-8")
