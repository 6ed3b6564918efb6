"""A run drawn as a Gantt chart: a row per worker, a bar per node attempt, transfers as arrows.

:func:`timeline_svg` returns a self-contained SVG (no script, nothing fetched);
:mod:`somatize_tasks.observe.timeline_page` wraps it in a page with tables, and the
dashboard redraws it while a run goes on. The data is a :class:`RunStatus`
and, when there is one, the run's history (:mod:`somatize_tasks.runtime.state.history`):
with it every attempt is drawn, a dead worker's unfinished one included, and
every loop pass; without it, each node's latest record.

What people open a timeline for is what went wrong, so: a failed node is a
red bar with its error beside it; an attempt whose worker died is a hatched
grey bar ("worker died"); nodes that never ran are marked in a last row
(skipped arms, cancelled, or "not run" after a failure). Labels that would
collide are left out (the bar's tooltip keeps them), so hundreds of short
nodes stay readable, and labels near the right edge turn to end there.

Structure a reader (or a test) can rely on: each worker row is a
``<g class="row" data-worker="...">`` holding ``<rect class="bar"
data-node="..." data-state="..." data-epoch="..." data-attempt="...">``;
a failure's text is ``<text class="error" data-node="...">``; a node that
never ran is ``<g class="mark" data-node="..." data-state="...">``; each
transfer is ``<path class="transfer" data-from-node=... data-to-node=...>``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from typing import Any

from somatize_tasks.observe.timeline_draw import (
    BAR_H,
    FONT,
    LABEL_LINE_H,
    LABEL_W,
    RIGHT_PAD,
    STATE_COLOURS,
    TOP,
    WIDTH,
    Layout,
    axis,
    defs,
    fmt_s,
    label_w,
    legend,
    row_backgrounds,
    row_height,
    text,
    transfers,
)
from somatize_tasks.runtime.producer.handle import RunStatus
from somatize_tasks.runtime.state.history import LOST, attempts

__all__ = ["STATE_COLOURS", "Bar", "bars_of", "not_run", "timeline_svg"]

MARK_H = 30
ERROR_CHARS = 90


@dataclass(frozen=True)
class Bar:
    node_id: str
    worker: str
    state: str
    start: float
    end: float
    lane: int = 0
    epoch: int = 0
    attempt: int = 1
    error: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def label(self) -> str:
        extra = [f"pass {self.epoch}"] if self.epoch else []
        extra += ["worker died"] if self.state == LOST else []
        extra += [f"try {self.attempt}"] if self.attempt > 1 else []
        return f"{self.node_id} ({', '.join(extra)})" if extra else self.node_id


def bars_of(
    status: RunStatus, history: list[dict[str, Any]] | None = None, now: float | None = None
) -> list[Bar]:
    """A bar per attempt (from the history), else per started node; open bars end ``now``."""
    now = time.time() if now is None else now
    stop = status.finished_at or now
    if history:
        out = []
        for a in attempts(history):
            state, start, end = a.state, a.start, a.end
            node = status.nodes.get(a.node_id)
            if (
                state == "running"
                and node is not None
                and node.state == "done"
                and node.worker == a.worker
                and node.started_at
                and node.ended_at
            ):
                start, end = node.started_at, node.ended_at  # done in a chain
                state = "cached" if node.cached else "done"
            elif state == "running" and status.state != "running":  # the run ended around it
                state = "cancelled" if status.state == "cancelled" else LOST
            end = end if end is not None else stop
            out.append(
                Bar(
                    a.node_id,
                    a.worker,
                    state,
                    start,
                    max(end, start),
                    epoch=a.epoch,
                    attempt=a.number,
                    error=a.error,
                )
            )
        return out
    bars = []
    for node_id, node in status.nodes.items():
        if node.worker is None or node.started_at is None:
            continue
        end = node.ended_at if node.ended_at is not None else stop
        bars.append(
            Bar(
                node_id,
                node.worker,
                node.state,
                node.started_at,
                max(end, node.started_at),
                error=node.error,
            )
        )
    return bars


def not_run(status: RunStatus, bars: list[Bar]) -> dict[str, str]:
    """Nodes with no bar, and what to call them: skipped, cancelled, failed, not run, pending."""
    drawn = {b.node_id for b in bars}
    marks = {}
    for node_id, node in status.nodes.items():
        if node_id in drawn:
            continue
        state = node.state
        if state in ("pending", "running") and status.state == "failed":
            state = "not run"
        marks[node_id] = state
    return marks


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
        placed.append(Bar(**{**bar.__dict__, "lane": lane}))
    return placed


def layout(status: RunStatus, bars: list[Bar]) -> Layout:
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
    placed = [b for group in by_worker.values() for b in group]
    last = {b.node_id: b for b in sorted(placed, key=lambda b: b.start)}
    return Layout(t0, t1, rows, last, placed)


def _rows(lay: Layout) -> list[str]:
    out = []
    for worker, (top, lanes) in lay.rows.items():
        height = row_height(lanes)
        out.append(f'<g class="row" data-worker="{escape(worker)}">')
        out.append(
            text(
                12, top + height / 2 + 4, worker, font_size="13", font_weight="600", fill="#24292f"
            )
        )
        out.extend(_lane_bars(lay, [b for b in lay.all_bars if b.worker == worker]))
        out.append("</g>")
    return out


def _lane_bars(lay: Layout, bars: list[Bar]) -> list[str]:
    """Each bar with its label above it, on one of two lines; a label that fits on
    neither is left out (the tooltip keeps it), so short nodes never smear."""
    out: list[str] = []
    line_ends: dict[tuple[int, int], float] = {}
    ordered = sorted(bars, key=lambda b: (b.lane, b.start))
    for i, bar in enumerate(ordered):
        x, y = lay.x(bar.start), lay.lane_y(bar.worker, bar.lane)
        width = max(bar.seconds * lay.scale, 2.0)
        following = next((lay.x(b.start) for b in ordered[i + 1 :] if b.lane == bar.lane), WIDTH)
        size = label_w(bar.label) + (6 + label_w(_error_text(bar)) if bar.error else 0)
        lx = max(min(x, WIDTH - 4 - size), 0.0)  # near the right edge: end the label there
        line = next((n for n in (0, 1) if line_ends.get((bar.lane, n), -1.0) < lx), None)
        if line is None and bar.error:
            line = 0  # a failure is always labelled, even over a neighbour's label
        if line is not None:
            line_ends[(bar.lane, line)] = lx + size + 6
        out.extend(_bar(bar, x, y, width, line, lx, following))
    return out


def _bar(
    bar: Bar, x: float, y: float, width: float, line: int | None, lx: float, following: float
) -> list[str]:
    colour = STATE_COLOURS.get(bar.state, "#9aa3ad")
    took = fmt_s(bar.seconds)
    title = f"{bar.label} on {bar.worker}: {bar.state}, {took}"
    if bar.error:
        title += f"\n{bar.error}"
    pattern = ' stroke="#6e7781" stroke-dasharray="3 2"' if bar.state == LOST else ""
    fill = "url(#lost)" if bar.state == LOST else colour
    out = [
        f'<rect class="bar" data-node="{escape(bar.node_id)}" '
        f'data-worker="{escape(bar.worker)}" data-state="{escape(bar.state)}" '
        f'data-epoch="{bar.epoch}" data-attempt="{bar.attempt}" '
        f'x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR_H}" rx="3" '
        f'fill="{fill}"{pattern}><title>{escape(title)}</title></rect>'
    ]
    if line is not None:
        out.append(
            text(
                lx + 1,
                y - 4 - line * LABEL_LINE_H,
                bar.label,
                font_size="11",
                fill="#24292f",
                class_="label",
            )
        )
    if label_w(took, 10) + 8 < width:
        out.append(
            text(
                x + width / 2,
                y + BAR_H / 2 + 3.5,
                took,
                font_size="10",
                fill="#24292f" if bar.state == LOST else "#ffffff",
                text_anchor="middle",
            )
        )
    elif x + width + 3 + label_w(took, 10) < min(following, WIDTH - 2) and not bar.error:
        out.append(text(x + width + 3, y + BAR_H / 2 + 3.5, took, font_size="10", fill="#5b6470"))
    if bar.error and line is not None:  # the reason, in red, after the label above the bar
        out.append(
            text(
                lx + 1 + label_w(bar.label) + 6,
                y - 4 - line * LABEL_LINE_H,
                _error_text(bar),
                font_size="11",
                fill=STATE_COLOURS["failed"],
                font_weight="600",
                class_="error",
                data_node=bar.node_id,
            )
        )
    return out


def _error_text(bar: Bar) -> str:
    error = bar.error or ""
    return "✗ " + (error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + "…")


MARK_WORDS = {
    "skipped": "skipped",
    "cancelled": "cancelled",
    "not run": "not run",
    "pending": "pending",
    "failed": "failed",
    "running": "waiting",
}


def _marks(marks: dict[str, str], y: float, errors: dict[str, str]) -> tuple[list[str], float]:
    """The nodes with no bar, as chips in a last row; returns the SVG and its height."""
    if not marks:
        return [], 0.0
    out = [
        f'<g class="marks"><rect x="0" y="{y:.1f}" width="{WIDTH}" height="{{h}}" fill="#fbfbfc"/>',
        text(12, y + 19, "never ran", font_size="13", font_weight="600", fill="#24292f"),
    ]
    x, line_y = float(LABEL_W), y + 8
    for node_id, state in marks.items():
        shown = f"{node_id}: {MARK_WORDS.get(state, state)}"
        if state == "failed" and errors.get(node_id):
            shown += f" ({errors[node_id][:ERROR_CHARS]})"
        w = label_w(shown) + 22
        if x + w > WIDTH - RIGHT_PAD and x > LABEL_W:
            x, line_y = float(LABEL_W), line_y + 20
        colour = STATE_COLOURS.get(state, STATE_COLOURS["pending"])
        out.append(
            f'<g class="mark" data-node="{escape(node_id)}" data-state="{escape(state)}">'
            f'<rect x="{x:.1f}" y="{line_y:.1f}" width="10" height="10" rx="5" '
            f'fill="none" stroke="{colour}" stroke-width="2"/>'
            + text(x + 14, line_y + 9, shown, font_size="11", fill="#24292f")
            + "</g>"
        )
        x += w
    height = line_y - y + 22
    out[0] = out[0].replace("{h}", f"{height:.1f}")
    out.append("</g>")
    return out, max(height, MARK_H)


def _title(status: RunStatus, lay: Layout, with_history: bool) -> list[str]:
    ran = len({b.node_id for b in lay.all_bars})
    workers = len({b.worker for b in lay.all_bars})
    span = (status.finished_at or lay.t1) - (status.created_at or lay.t0)

    def count(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    line = (
        f"{status.state} · {fmt_s(span)} · {count(ran, 'node')} on "
        f"{count(workers, 'worker')} · {count(len(status.transfers), 'transfer')}"
    )
    note = (
        "every attempt and loop pass drawn"
        if with_history
        else "a node run several times (in a Loop) shows its last pass"
    )
    return [
        text(
            LABEL_W, 28, f"run {status.run_id}", font_size="17", font_weight="700", fill="#24292f"
        ),
        text(LABEL_W, 48, line, font_size="12", fill="#5b6470"),
        text(WIDTH - RIGHT_PAD, 48, note, font_size="11", fill="#8a939d", text_anchor="end"),
    ]


def timeline_svg(
    status: RunStatus, now: float | None = None, history: list[dict[str, Any]] | None = None
) -> str:
    """The run as a standalone SVG document (UTF-8 text)."""
    bars = bars_of(status, history, now)
    lay = layout(status, bars)
    errors = {n: s.error for n, s in status.nodes.items() if s.error}
    marks, marks_h = _marks(not_run(status, bars), lay.bottom, errors)
    bottom = lay.bottom + marks_h
    height = bottom + 30 + 44
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" style="{FONT}" role="img" '
        f'aria-label="timeline of run {escape(status.run_id)}">',
        defs(),
        f'<rect width="{WIDTH}" height="{height:.0f}" fill="#ffffff"/>',
        *_title(status, lay, bool(history)),
        *row_backgrounds(lay),
        *axis(lay, bottom),
        *_rows(lay),
        *marks,
        *transfers(lay, status.transfers),
        *legend(bottom + 36),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"
