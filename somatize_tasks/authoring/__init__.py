"""Writing plans in Python, and reading the plans Soma saves.

Build a plan with the operators a Soma user knows, from the catalog's own
functions and classes (or node ids)::

    from somatize_tasks.authoring import op, loop, remote

    plan = op(load) >> normalize >> op(train_svm, epochs=50).to([score, report])
    run = submit_plan(plan, input=...)

``build(piece)`` gives the :class:`BuiltPlan` (its ``to_json()`` is what
Soma's serde writes, plus ``predecessors`` for a graph); ``submit_plan``,
``run_local`` and ``somatize-tasks`` accept a piece, a built plan, or a
Soma checkpoint bundle (``Graph.save``'s ``model.zip``).
"""

from somatize_tasks.authoring.build import BuiltPlan, build
from somatize_tasks.authoring.pieces import Op, Piece
from somatize_tasks.authoring.variants import (
    branch,
    composite,
    empty,
    loop,
    op,
    remote,
    step,
    stream,
)

__all__ = [
    "BuiltPlan",
    "Op",
    "Piece",
    "branch",
    "build",
    "composite",
    "empty",
    "loop",
    "op",
    "remote",
    "step",
    "stream",
]
