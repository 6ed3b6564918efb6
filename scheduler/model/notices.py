"""Warnings about a plan that loads but may not do what its author expects.

Soma's serde ignores fields it does not know, so a plan written by a newer
Soma loads here too; the fields are named once so nobody is surprised. A
Loop with no ``max_iterations`` stops at Soma's cap of 100 passes, and a
``BodyTerminal`` loop (Soma's compiler resolves that to a concrete node, so
its executor never sees one) runs to its cap, as Soma's executor does.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.model.plan_nodes import SOMA_LOOP_CAP, Loop


def summarize(unknown: Iterable[str], loops: Iterable[Loop]) -> list[str]:
    """The warnings for these unknown fields (``Variant.field``) and loops."""
    fields = list(unknown)
    found = []
    if fields:
        found.append("ignored plan fields this version does not know: " + ", ".join(fields))
    for loop in loops:
        found.extend(_loop_warnings(loop))
    return found


def _loop_warnings(loop: Loop) -> list[str]:
    notes = []
    if loop.max_iterations is None:
        notes.append(
            f"loop '{loop.node_id}' has no max_iterations: it stops after "
            f"{SOMA_LOOP_CAP} passes at the latest, as in Soma"
        )
    if loop.until.type == "BodyTerminal":
        notes.append(
            f"loop '{loop.node_id}' stops on BodyTerminal, which Soma's compiler turns into "
            f"a named node; like Soma's executor, this runs it for all {loop.cap} passes "
            "(use WhenSignaled to stop on a node's signal)"
        )
    return notes
