"""Soma's ``ExecutionPlan``: a whole plan, loaded from and written to serde's JSON.

Soma serialises the enum externally tagged: every variant is an object with
one key, the variant's name (``{"Execute": {"node_id": "a"}}``), except the
unit variant ``"Empty"``, which is a bare string. Here each variant is its
own small pydantic model (``Execute``, ``Sequence``, ...) with natural field
names, and ``ExecutionPlan`` is the boundary type that reads and writes the
wire form:

    >>> plan = ExecutionPlan.model_validate({"Sequence": [{"Execute": {"node_id": "a"}}]})
    >>> plan.root
    Sequence(steps=[Execute(node_id='a')])
    >>> plan.model_dump(mode="json")
    {'Sequence': [{'Execute': {'node_id': 'a'}}]}

Loading checks what serde cannot: node ids are non-empty and unique across
the whole plan, Branch labels are unique, and a Loop's ``until.node`` and
``carry_from`` name nodes of the plan. Every problem is reported as a
:class:`PlanValidationError` naming the path. A Loop with no
``max_iterations`` runs at most :data:`SOMA_LOOP_CAP` passes, as in Soma.

Why this module: it is the one door in and out of the plan format, and the
place every caller imports the plan's names from. Behind it:

- :mod:`scheduler.model.plan_nodes`: the ten variant models, their ids and wire form;
- :mod:`scheduler.model.plan_nodes`: ``PlanNode``, the tagged union that tells them apart;
- :mod:`scheduler.model.plan_checks`: the whole-plan checks run on every load.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import PrivateAttr, RootModel, ValidationError

from scheduler.errors import FieldProblem, PlanValidationError
from scheduler.model.depth import check_text_depth, check_value_depth, decode_json_text
from scheduler.model.plan_checks import structural_problems
from scheduler.model.plan_nodes import (
    SOMA_LOOP_CAP,
    VARIANT_TAGS,
    VARIANTS,
    Branch,
    Composite,
    Empty,
    Execute,
    Loop,
    LoopCondition,
    NodeId,
    Parallel,
    PlanNode,
    Remote,
    RemoteTarget,
    Sequence,
    Step,
    Stream,
    Variant,
)
from scheduler.model.validation import problems_from_pydantic


class ExecutionPlan(RootModel[PlanNode]):
    """A whole plan: the wire boundary around one variant (``.root``).

    ``model_validate`` / ``model_validate_json`` raise
    :class:`PlanValidationError` (never pydantic's own error) naming every
    bad field's path; ``model_dump(mode="json")`` writes what serde writes.
    """

    root: PlanNode
    #: The plan's warnings (scheduler.model.notices), gathered by check() in its walk.
    _notes: list[str] | None = PrivateAttr(default=None)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> ExecutionPlan:
        check_value_depth(obj)  # before anything that recurses
        try:
            plan = super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise PlanValidationError("plan", problems_from_pydantic(exc, VARIANT_TAGS)) from None
        plan.check()
        return plan

    @classmethod
    def model_validate_json(
        cls, json_data: str | bytes | bytearray, *args: Any, **kwargs: Any
    ) -> ExecutionPlan:
        check_text_depth(decode_json_text(json_data))  # before anything that recurses
        try:
            plan = super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise PlanValidationError("plan", problems_from_pydantic(exc, VARIANT_TAGS)) from None
        plan.check()
        return plan

    @classmethod
    def of(cls, root: Variant) -> ExecutionPlan:
        """Wrap a variant built in Python, checking it like a loaded plan."""
        plan = cls.model_construct(root=cast("PlanNode", root))
        plan.check()
        return plan

    def node_ids(self) -> list[str]:
        """Every node id, in Soma's order."""
        return self.root.node_ids()

    def to_wire(self) -> Any:
        return self.root.to_wire()

    def check(self) -> None:
        """Raise :class:`PlanValidationError` for what the schema cannot see."""

        notes: list[str] = []
        problems = structural_problems(self.root, notes)
        if problems:
            raise PlanValidationError("plan", problems)
        self._notes = notes


def plan_warnings(plan: ExecutionPlan | PlanNode) -> list[str]:
    """The plan's warnings, in walk order; one line each.

    A loaded :class:`ExecutionPlan` gathered them while it was checked, so
    this costs nothing on the scheduling path.
    """
    if isinstance(plan, ExecutionPlan):
        if plan._notes is None:
            plan.check()
        return list(plan._notes or [])
    return plan_warnings(ExecutionPlan.of(plan))


def load_plan(document: Any) -> ExecutionPlan:
    """A plan from an ``ExecutionPlan``, a variant, JSON text/bytes or a parsed dict."""
    if isinstance(document, ExecutionPlan):
        return document
    if isinstance(document, Variant):
        return ExecutionPlan.of(document)
    if isinstance(document, str | bytes | bytearray):
        return ExecutionPlan.model_validate_json(document)
    return ExecutionPlan.model_validate(document)


__all__ = [
    "SOMA_LOOP_CAP",
    "VARIANTS",
    "VARIANT_TAGS",
    "Branch",
    "Composite",
    "Empty",
    "Execute",
    "ExecutionPlan",
    "FieldProblem",
    "Loop",
    "LoopCondition",
    "NodeId",
    "Parallel",
    "PlanNode",
    "Remote",
    "RemoteTarget",
    "Sequence",
    "Step",
    "Stream",
    "load_plan",
    "plan_warnings",
]
