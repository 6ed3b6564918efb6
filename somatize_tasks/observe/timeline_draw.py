"""The timeline's drawing kit: scale, rows, axis, arrows, legend, text.

Kept apart from :mod:`somatize_tasks.observe.timeline` (what is drawn and why) so
each stays small; nothing here knows about runs, only about spans on rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

STATE_COLOURS = {
    "done": "#2e9d5b",
    "cached": "#9fd8b4",
    "running": "#2f7fd8",
    "failed": "#d64541",
    "cancelled": "#e59a26",
    "lost": "#b7bec6",
    "skipped": "#8c959f",
    "not run": "#c9ced4",
    "pending": "#9aa3ad",
}
LEGEND_STATES = ("done", "cached", "running", "failed", "cancelled", "lost", "skipped", "not run")
LEGEND_NAMES = {
    "lost": "worker died",
    "skipped": "skipped arm",
    "not run": "never ran",
    "cached": "from the cache",
}
TRANSFER_DASH = {"peer": "8 2 2 2", "s3": "", "direct": "5 4", "cached": "1 4"}
TRANSFER_WORDS = {
    "peer": "worker to worker, pulled from its holder",
    "s3": "through the shared store",
    "direct": "inline, in the message",
    "cached": "already in the store",
}
LEGEND_WORDS = {"peer": "worker to worker", "s3": "store", "direct": "inline", "cached": "cached"}


def transfer_words(transfer: dict[str, Any]) -> str:
    """How one transfer moved, in words; a fallback says why it did not go direct."""
    kind = str(transfer.get("transfer_type"))
    words = TRANSFER_WORDS.get(kind, kind)
    fallback = transfer.get("fallback")
    return f"{words} (the direct pull failed: {fallback})" if fallback else words


WIDTH = 1000
LABEL_W = 150
RIGHT_PAD = 30
TOP = 70
LANE_H = 50  # two staggered label lines above a bar, then the bar
BAR_H = 20
LABEL_LINE_H = 13
ROW_PAD = 10
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"


class Span(Protocol):
    @property
    def node_id(self) -> str: ...
    @property
    def worker(self) -> str: ...
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def lane(self) -> int: ...


@dataclass
class Layout:
    """Where everything goes: time scale, worker rows, the last bar of each node."""

    t0: float
    t1: float
    rows: dict[str, tuple[float, int]]  # worker -> (top y, lane count)
    bars: dict[str, Any]  # node id -> its last Span (transfers point at it)
    all_bars: list[Any]

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


def tick_step(span_s: float) -> float:
    """A round tick interval giving about 6 to 12 ticks."""
    raw = span_s / 8
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def fmt_s(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.0f} ms"


def fmt_bytes(n: Any) -> str:
    try:
        size = float(n)
    except (TypeError, ValueError):
        return ""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def text(x: float, y: float, body: str, **attrs: Any) -> str:
    """A ``<text>``; ``font_size`` becomes ``font-size``, ``class_`` becomes ``class``."""
    extra = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items()
    )
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(body)}</text>'


def label_w(body: str, size_px: float = 11) -> float:
    """A generous estimate of a label's width (no font metrics in here)."""
    return len(body) * size_px * 0.62


def defs() -> str:
    return (
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#3b4652"/></marker>'
        '<pattern id="lost" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#dfe3e8"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#8c959f" stroke-width="2"/></pattern>'
        "</defs>"
    )


def axis(lay: Layout, bottom: float) -> list[str]:
    out = ['<g class="axis" font-size="11" fill="#5b6470">']
    step = tick_step(lay.t1 - lay.t0)
    tick = 0.0
    while lay.t0 + tick <= lay.t1 + 1e-9:
        x = lay.x(lay.t0 + tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{bottom:.1f}" '
            'stroke="#e3e7ec" stroke-width="1"/>'
        )
        out.append(text(x, bottom + 16, fmt_s(tick), text_anchor="middle"))
        tick += step
    out.append("</g>")
    return out


def row_backgrounds(lay: Layout) -> list[str]:
    """Alternating stripes, drawn first so the grid and the bars go over them."""
    return [
        f'<rect class="row-bg" x="0" y="{top:.1f}" width="{WIDTH}" height="{row_height(lanes)}" '
        f'fill="{"#f6f8fa" if index % 2 == 0 else "#ffffff"}"/>'
        for index, (top, lanes) in enumerate(lay.rows.values())
    ]


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


def transfers(lay: Layout, moves: Iterable[dict[str, Any]]) -> list[str]:
    out = ['<g class="transfers" fill="none">']
    for t in moves:
        points = _transfer_points(lay, t)
        if points is None:
            continue
        x1, y1, x2, y2 = points
        kind = str(t.get("transfer_type"))
        bend = max(abs(y2 - y1) * 0.5, 18.0)
        path = (
            f"M {x1:.1f} {y1:.1f} C {x1 + bend:.1f} {y1:.1f}, {x2 - bend:.1f} {y2:.1f}, "
            f"{x2:.1f} {y2:.1f}"
        )
        dash = TRANSFER_DASH.get(kind, "")
        title = (
            f"{t.get('from_node')} ({t.get('from_worker')}) -> {t.get('to_node')} "
            f"({t.get('to_worker')}): {transfer_words(t)}, "
            f"{fmt_bytes(t.get('bytes'))}"
        )
        out.append(
            f'<path class="transfer" data-from-node="{escape(str(t.get("from_node")))}" '
            f'data-to-node="{escape(str(t.get("to_node")))}" '
            f'data-from-worker="{escape(str(t.get("from_worker")))}" '
            f'data-to-worker="{escape(str(t.get("to_worker")))}" data-type="{escape(kind)}" '
            f'd="{path}" stroke="#3b4652" stroke-width="1.6" '
            + (f'stroke-dasharray="{dash}" ' if dash else "")
            + f'marker-end="url(#arrow)"><title>{escape(title)}</title></path>'
        )
        shown = f"{kind} (fallback)" if t.get("fallback") else kind
        label = f"{shown} · {fmt_bytes(t.get('bytes'))}"
        lx, ly = min((x1 + x2) / 2 + 6, WIDTH - 4 - label_w(label, 10)), (y1 + y2) / 2
        out.append(
            f'<rect x="{lx - 2:.1f}" y="{ly - 8:.1f}" width="{label_w(label, 10) + 4:.1f}" '
            'height="12" rx="2" fill="#ffffff" fill-opacity="0.85"/>'
        )
        out.append(text(lx, ly + 1.5, label, font_size="10", fill="#3b4652"))
    out.append("</g>")
    return out


def legend(y: float) -> list[str]:
    out = [f'<g class="legend" font-size="11" fill="#24292f" transform="translate(12,{y:.1f})">']
    x = 0.0
    for state in LEGEND_STATES:
        fill = "url(#lost)" if state == "lost" else STATE_COLOURS[state]
        out.append(f'<rect x="{x:.1f}" y="0" width="14" height="12" rx="3" fill="{fill}"/>')
        name = LEGEND_NAMES.get(state, state)
        out.append(text(x + 19, 10, name))
        x += 26 + label_w(name)
    for kind, dash in TRANSFER_DASH.items():
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{x:.1f}" y1="6" x2="{x + 22:.1f}" y2="6" stroke="#3b4652" '
            f'stroke-width="1.6"{extra} marker-end="url(#arrow)"/>'
        )
        out.append(text(x + 27, 10, LEGEND_WORDS[kind]))
        x += 36 + label_w(LEGEND_WORDS[kind])
    out.append("</g>")
    return out
