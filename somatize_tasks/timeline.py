"""A run drawn as a Gantt chart: a row per worker, a bar per node, transfers as arrows.

:func:`timeline_svg` returns a self-contained SVG (no script, no fonts or
styles fetched from anywhere); :func:`timeline_html` embeds it in a page
with a legend and the node and transfer tables. The data is a
:class:`RunStatus` (``PlanRun.attach(run_id).status()``): each node's
state, worker and start/end times, and the run's transfer log.

Structure a reader (or a test) can rely on: each worker row is a
``<g class="row" data-worker="...">`` holding that worker's bars,
``<rect class="bar" data-node="..." data-state="...">``; each transfer is a
``<path class="transfer" data-from-node=... data-to-node=...>``. A node that
ran in a loop shows its last pass (the run state keeps one record per node).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from somatize_tasks.runtime.handle import NodeStatus, RunStatus

STATE_COLOURS = {
    "done": "#2e9d5b",
    "running": "#2f7fd8",
    "failed": "#d64541",
    "cancelled": "#e59a26",
    "pending": "#9aa3ad",
}
TRANSFER_DASH = {"s3": "", "direct": "5 4", "cached": "1 4"}
TRANSFER_WORDS = {"s3": "through the shared store", "direct": "inline, in the message",
                  "cached": "already in the store"}
LEGEND_WORDS = {"s3": "s3: shared store", "direct": "direct: inline", "cached": "cached"}
PRODUCER_ROW = "producer"

WIDTH = 1000
LABEL_W = 150
RIGHT_PAD = 30
TOP = 70
LANE_H = 50  # two staggered label lines above a bar, then the bar
BAR_H = 20
LABEL_LINE_H = 13
ROW_PAD = 10
AXIS_H = 30
LEGEND_H = 44
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"


@dataclass(frozen=True)
class Bar:
    node_id: str
    worker: str
    state: str
    start: float
    end: float
    lane: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def bars_of(status: RunStatus, now: float | None = None) -> list[Bar]:
    """A bar per node that started on a worker; a running node's bar ends ``now``."""
    now = time.time() if now is None else now
    bars = []
    for node_id, node in status.nodes.items():
        if node.worker is None or node.started_at is None:
            continue
        end = node.ended_at if node.ended_at is not None else (status.finished_at or now)
        end = max(end, node.started_at)
        bars.append(Bar(node_id, node.worker, node.state, node.started_at, end))
    return bars


def _assign_lanes(bars: list[Bar]) -> list[Bar]:
    """Bars of one worker that overlap in time go to separate lanes (a worker runs several)."""
    placed: list[Bar] = []
    lane_ends: list[float] = []
    for bar in sorted(bars, key=lambda b: (b.start, b.node_id)):
        lane = next((i for i, end in enumerate(lane_ends) if end <= bar.start), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(bar.end)
        else:
            lane_ends[lane] = bar.end
        placed.append(Bar(bar.node_id, bar.worker, bar.state, bar.start, bar.end, lane))
    return placed


@dataclass
class Layout:
    """Where everything goes: time scale, worker rows, bars by node."""

    t0: float
    t1: float
    rows: dict[str, tuple[float, int]]  # worker -> (top y, lane count)
    bars: dict[str, Bar]

    @property
    def scale(self) -> float:
        return (WIDTH - LABEL_W - RIGHT_PAD) / max(self.t1 - self.t0, 1e-3)

    def x(self, t: float) -> float:
        return LABEL_W + (t - self.t0) * self.scale

    def lane_y(self, worker: str, lane: int) -> float:
        """The top of a bar in ``lane`` (its labels sit above it)."""
        top, _ = self.rows[worker]
        return top + ROW_PAD / 2 + lane * LANE_H + (LANE_H - BAR_H) - 3

    def centre_y(self, worker: str, lane: int = 0) -> float:
        top, lanes = self.rows[worker]
        if not lanes:
            return top + row_height(0) / 2
        return self.lane_y(worker, lane) + BAR_H / 2

    @property
    def bottom(self) -> float:
        return max((top + row_height(lanes) for top, lanes in self.rows.values()), default=TOP)


def row_height(lanes: int) -> float:
    """A worker row's height: its lanes, or a thin row for one with no bars (the producer)."""
    return lanes * LANE_H + ROW_PAD if lanes else 34.0


def layout(status: RunStatus, now: float | None = None) -> Layout:
    bars = bars_of(status, now)
    workers = sorted({b.worker for b in bars})
    transfer_workers = {
        str(t.get(k)) for t in status.transfers for k in ("from_worker", "to_worker")
    }
    extra = sorted(w for w in transfer_workers - set(workers) if w and w != "None")
    by_worker = {w: _assign_lanes([b for b in bars if b.worker == w]) for w in workers}
    times = [b.start for b in bars] + [b.end for b in bars]
    times += [float(t["at"]) for t in status.transfers if t.get("at")]
    times += [t for t in (status.created_at, status.finished_at) if t]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    rows: dict[str, tuple[float, int]] = {}
    y = float(TOP)
    for worker in extra + workers:  # the producer (a transfer source only) on top
        lanes = max((b.lane + 1 for b in by_worker.get(worker, [])), default=0)
        rows[worker] = (y, lanes)
        y += row_height(lanes)
    placed = {b.node_id: b for group in by_worker.values() for b in group}
    return Layout(t0, t1, rows, placed)


def _tick_step(span_s: float) -> float:
    """A round tick interval giving about 6 to 12 ticks."""
    raw = span_s / 8
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _fmt_s(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.0f} ms"


def _fmt_bytes(n: Any) -> str:
    try:
        size = float(n)
    except (TypeError, ValueError):
        return ""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def _text(x: float, y: float, body: str, **attrs: Any) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(body)}</text>'


def _axis(lay: Layout) -> list[str]:
    out = ['<g class="axis" font-size="11" fill="#5b6470">']
    step = _tick_step(lay.t1 - lay.t0)
    tick = 0.0
    while lay.t0 + tick <= lay.t1 + 1e-9:
        x = lay.x(lay.t0 + tick)
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{lay.bottom:.1f}" '
                   'stroke="#e3e7ec" stroke-width="1"/>')
        out.append(_text(x, lay.bottom + 16, _fmt_s(tick), text_anchor="middle"))
        tick += step
    out.append("</g>")
    return out


def _row_backgrounds(lay: Layout) -> list[str]:
    """Alternating stripes, drawn first so the grid and the bars go over them."""
    return [
        f'<rect class="row-bg" x="0" y="{top:.1f}" width="{WIDTH}" height="{row_height(lanes)}" '
        f'fill="{"#f6f8fa" if index % 2 == 0 else "#ffffff"}"/>'
        for index, (top, lanes) in enumerate(lay.rows.values())
    ]


def _rows(lay: Layout) -> list[str]:
    out = []
    for worker, (top, lanes) in lay.rows.items():
        height = row_height(lanes)
        out.append(f'<g class="row" data-worker="{escape(worker)}">')
        out.append(_text(12, top + height / 2 + 4, worker, font_size="13", font_weight="600",
                         fill="#24292f"))
        out.extend(_lane_bars(lay, [b for b in lay.bars.values() if b.worker == worker]))
        out.append("</g>")
    return out


def _label_w(text: str, size_px: float = 11) -> float:
    """A generous estimate of a label's width (no font metrics in here)."""
    return len(text) * size_px * 0.62


def _lane_bars(lay: Layout, bars: list[Bar]) -> list[str]:
    """Each bar with its node id above it; a label that would run into the one
    before it on the same line moves up a line (two lines, alternating)."""
    out: list[str] = []
    line_ends: dict[tuple[int, int], float] = {}
    for bar in sorted(bars, key=lambda b: (b.lane, b.start)):
        x, y = lay.x(bar.start), lay.lane_y(bar.worker, bar.lane)
        width = max(bar.seconds * lay.scale, 3.0)
        line = 0 if line_ends.get((bar.lane, 0), -1.0) < x else 1
        if line == 1 and line_ends.get((bar.lane, 1), -1.0) >= x:
            line = 0  # both taken: overlap the lower one rather than climb out of the row
        line_ends[(bar.lane, line)] = x + _label_w(bar.node_id) + 6
        out.extend(_bar(bar, x, y, width, line))
    return out


def _bar(bar: Bar, x: float, y: float, width: float, label_line: int) -> list[str]:
    colour = STATE_COLOURS.get(bar.state, "#9aa3ad")
    took = _fmt_s(bar.seconds)
    title = f"{bar.node_id} on {bar.worker}: {bar.state}, {took}"
    out = [f'<rect class="bar" data-node="{escape(bar.node_id)}" '
           f'data-worker="{escape(bar.worker)}" data-state="{escape(bar.state)}" '
           f'x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
           f'height="{BAR_H}" rx="4" fill="{colour}"><title>{escape(title)}</title></rect>']
    label_y = y - 4 - label_line * LABEL_LINE_H
    out.append(_text(x + 1, label_y, bar.node_id, font_size="11", fill="#24292f"))
    if _label_w(took, 10) + 8 < width:
        out.append(_text(x + width / 2, y + BAR_H / 2 + 3.5, took, font_size="10",
                         fill="#ffffff", text_anchor="middle"))
    else:  # too narrow: the duration goes right of the bar
        out.append(_text(x + width + 3, y + BAR_H / 2 + 3.5, took, font_size="10", fill="#5b6470"))
    return out


def _transfer_points(lay: Layout, t: dict[str, Any]) -> tuple[float, float, float, float] | None:
    src_worker, dst_worker = str(t.get("from_worker")), str(t.get("to_worker"))
    if src_worker not in lay.rows or dst_worker not in lay.rows:
        return None
    at = float(t.get("at") or lay.t0)
    src = lay.bars.get(str(t.get("from_node")))
    dst = lay.bars.get(str(t.get("to_node")))
    src_here = src is not None and src.worker == src_worker
    x1 = lay.x(src.end) if src and src_here else lay.x(min(at, dst.start if dst else at))
    y1 = lay.centre_y(src_worker, src.lane if src and src_here else 0)
    x2 = lay.x(dst.start) if dst and dst.worker == dst_worker else lay.x(at)
    y2 = lay.centre_y(dst_worker, dst.lane if dst and dst.worker == dst_worker else 0)
    # Arrows go from the value's bar to the reading bar, on the edge facing it.
    y1 += BAR_H / 2 if y2 > y1 else -BAR_H / 2 if y2 < y1 else 0
    y2 += -BAR_H / 2 if y2 > y1 else BAR_H / 2 if y2 < y1 else 0
    return x1, y1, max(x2, x1), y2


def _transfers(lay: Layout, transfers: Iterable[dict[str, Any]]) -> list[str]:
    out = ['<g class="transfers" fill="none">']
    for t in transfers:
        points = _transfer_points(lay, t)
        if points is None:
            continue
        x1, y1, x2, y2 = points
        kind = str(t.get("transfer_type"))
        bend = max(abs(y2 - y1) * 0.5, 18.0)
        path = (f"M {x1:.1f} {y1:.1f} C {x1 + bend:.1f} {y1:.1f}, {x2 - bend:.1f} {y2:.1f}, "
                f"{x2:.1f} {y2:.1f}")
        dash = TRANSFER_DASH.get(kind, "")
        title = (f"{t.get('from_node')} ({t.get('from_worker')}) -> {t.get('to_node')} "
                 f"({t.get('to_worker')}): {TRANSFER_WORDS.get(kind, kind)}, "
                 f"{_fmt_bytes(t.get('bytes'))}")
        out.append(
            f'<path class="transfer" data-from-node="{escape(str(t.get("from_node")))}" '
            f'data-to-node="{escape(str(t.get("to_node")))}" '
            f'data-from-worker="{escape(str(t.get("from_worker")))}" '
            f'data-to-worker="{escape(str(t.get("to_worker")))}" data-type="{escape(kind)}" '
            f'd="{path}" stroke="#3b4652" stroke-width="1.6" '
            + (f'stroke-dasharray="{dash}" ' if dash else "")
            + f'marker-end="url(#arrow)"><title>{escape(title)}</title></path>'
        )
        label = f"{kind} · {_fmt_bytes(t.get('bytes'))}"
        lx, ly = (x1 + x2) / 2 + 6, (y1 + y2) / 2
        out.append(f'<rect x="{lx - 2:.1f}" y="{ly - 8:.1f}" width="{_label_w(label, 10) + 4:.1f}" '
                   'height="12" rx="2" fill="#ffffff" fill-opacity="0.85"/>')
        out.append(_text(lx, ly + 1.5, label, font_size="10", fill="#3b4652"))
    out.append("</g>")
    return out


def _legend(y: float) -> list[str]:
    out = [f'<g class="legend" font-size="11" fill="#24292f" '
           f'transform="translate({LABEL_W},{y:.1f})">']
    x = 0.0
    for state in ("done", "running", "failed", "cancelled"):
        out.append(f'<rect x="{x:.1f}" y="0" width="14" height="12" rx="3" '
                   f'fill="{STATE_COLOURS[state]}"/>')
        out.append(_text(x + 19, 10, state))
        x += 80
    for kind, dash in TRANSFER_DASH.items():
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x:.1f}" y1="6" x2="{x + 26:.1f}" y2="6" stroke="#3b4652" '
                   f'stroke-width="1.6"{extra} marker-end="url(#arrow)"/>')
        out.append(_text(x + 32, 10, LEGEND_WORDS[kind]))
        x += 150
    out.append("</g>")
    return out


def _title(status: RunStatus, lay: Layout) -> list[str]:
    ran = sum(1 for n in status.nodes.values() if n.started_at is not None)
    workers = len({b.worker for b in lay.bars.values()})
    span = (status.finished_at or lay.t1) - (status.created_at or lay.t0)
    line = (f"{status.state} · {_fmt_s(span)} · {ran} node(s) on {workers} worker(s) · "
            f"{len(status.transfers)} transfer(s)")
    return [_text(LABEL_W, 28, f"run {status.run_id}", font_size="17", font_weight="700",
                  fill="#24292f"),
            _text(LABEL_W, 48, line, font_size="12", fill="#5b6470"),
            _text(WIDTH - RIGHT_PAD, 48, "a node run several times (in a Loop) shows its last pass",
                  font_size="11", fill="#8a939d", text_anchor="end")]


def timeline_svg(status: RunStatus, now: float | None = None) -> str:
    """The run as a standalone SVG document (UTF-8 text)."""
    lay = layout(status, now)
    height = lay.bottom + AXIS_H + LEGEND_H
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" style="{FONT}" role="img" '
        f'aria-label="timeline of run {escape(status.run_id)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#3b4652"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{height:.0f}" fill="#ffffff"/>',
        *_title(status, lay),
        *_row_backgrounds(lay),
        *_axis(lay),
        *_rows(lay),
        *_transfers(lay, status.transfers),
        *_legend(lay.bottom + AXIS_H + 6),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _node_rows(status: RunStatus, t0: float) -> str:
    def cells(node_id: str, node: NodeStatus) -> str:
        start = f"+{_fmt_s(node.started_at - t0)}" if node.started_at else ""
        took = _fmt_s(node.ended_at - node.started_at) if node.started_at and node.ended_at else ""
        colour = STATE_COLOURS.get(node.state, "#9aa3ad")
        return (f"<tr><td>{escape(node_id)}</td><td><span class='dot' style='background:{colour}'>"
                f"</span>{escape(node.state)}</td><td>{escape(node.worker or '')}</td>"
                f"<td>{start}</td><td>{took}</td></tr>")

    return "\n".join(cells(n, s) for n, s in status.nodes.items())


def _how(transfer: dict[str, Any]) -> str:
    kind = str(transfer.get("transfer_type"))
    return TRANSFER_WORDS.get(kind, kind)


def _transfer_rows(status: RunStatus) -> str:
    return "\n".join(
        f"<tr><td>{escape(str(t.get('from_node')))} &rarr; {escape(str(t.get('to_node')))}</td>"
        f"<td>{escape(str(t.get('from_worker')))} &rarr; {escape(str(t.get('to_worker')))}</td>"
        f"<td>{escape(_how(t))}</td><td>{_fmt_bytes(t.get('bytes'))}</td></tr>"
        for t in status.transfers
    )


_CSS = """
body{margin:24px;color:#24292f;
 font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
h2{font-size:15px;margin:28px 0 8px}
table{border-collapse:collapse;font-size:13px}
td,th{padding:4px 12px;border-bottom:1px solid #e3e7ec;text-align:left}
th{color:#5b6470;font-weight:600}
.dot{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:6px}
.svg{overflow-x:auto}
"""


def timeline_html(status: RunStatus, now: float | None = None) -> str:
    """A self-contained page: the SVG, then the node and transfer tables."""
    svg = timeline_svg(status, now).split("\n", 1)[1]  # drop the XML declaration
    t0 = status.created_at or layout(status, now).t0
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>run {escape(status.run_id)}: timeline</title>
<style>{_CSS}</style></head>
<body>
<div class="svg">{svg}</div>
<h2>Nodes</h2>
<table><tr><th>node</th><th>state</th><th>worker</th><th>started</th><th>took</th></tr>
{_node_rows(status, t0)}
</table>
<h2>Transfers</h2>
<table><tr><th>value</th><th>workers</th><th>how</th><th>size</th></tr>
{_transfer_rows(status)}
</table>
</body></html>
"""


def write_timeline(status: RunStatus, path: Path) -> None:
    """Write ``path`` as SVG (``.svg``) or HTML (anything else)."""
    text = timeline_svg(status) if path.suffix.lower() == ".svg" else timeline_html(status)
    path.write_text(text, encoding="utf-8")
