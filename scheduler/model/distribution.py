"""The scheduler's output: who runs what, in which phase, and what data moves.

The JSON form matches Soma's ``DistributionPlan`` exactly; ``Phase`` is
snake_case: ``"sequential"``, ``"parallel"`` or
``{"trial": {"trial_index": 0, "total": 4}}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer, model_validator

from scheduler.errors import PlanValidationError
from scheduler.model.validation import problems_from_pydantic

TransferType = Literal["s3", "direct", "cached"]


class Phase(BaseModel):
    """Sequential, parallel, or one trial of a study."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["sequential", "parallel", "trial"]
    trial_index: int | None = None
    total: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"kind": value}
        if isinstance(value, dict) and set(value) == {"trial"} and isinstance(value["trial"], dict):
            return {"kind": "trial", **value["trial"]}
        return value

    @model_validator(mode="after")
    def _trial_has_numbers(self) -> Phase:
        is_trial = self.kind == "trial"
        if is_trial != (self.trial_index is not None and self.total is not None):
            raise ValueError("a trial phase has trial_index and total; other phases have neither")
        return self

    @model_serializer(mode="plain")
    def _to_wire(self) -> Any:
        if self.kind == "trial":
            return {"trial": {"trial_index": self.trial_index, "total": self.total}}
        return self.kind

    @classmethod
    def trial(cls, trial_index: int, total: int) -> Phase:
        return cls(kind="trial", trial_index=trial_index, total=total)

    def describe(self) -> str:
        if self.kind == "trial":
            return f"trial {self.trial_index} of {self.total}"
        return self.kind


SEQUENTIAL = Phase(kind="sequential")
PARALLEL = Phase(kind="parallel")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


def trusted(cls: type[_M], rows: Iterable[dict[str, Any]]) -> list[_M]:
    """Instances of ``cls`` holding each of ``rows`` as given: no validation, no defaults.

    What ``model_construct`` does, at a third of its cost (it matters at one
    instance per assignment and per transfer). Only for data the scheduler
    built itself: each row must name every field, with a value of the right
    type, and becomes its instance's ``__dict__``. The instances behave like
    any other (dump, compare, copy); ``cls`` must have no private attributes.
    """
    new = object.__new__
    set_attr = object.__setattr__
    # Every field is set, so pydantic never adds to this set (assignment adds
    # a name already there), and the instances can share it.
    fields_set = set(cls.model_fields)
    out: list[_M] = []
    append = out.append
    for row in rows:
        obj = new(cls)
        set_attr(obj, "__dict__", row)
        set_attr(obj, "__pydantic_fields_set__", fields_set)
        set_attr(obj, "__pydantic_extra__", None)
        set_attr(obj, "__pydantic_private__", None)
        append(obj)
    return out


class Assignment(_Model):
    node_id: str
    worker_id: str
    worker_name: str
    phase: Phase
    reason: str


class PlanPhase(_Model):
    phase_index: int
    phase_type: Phase
    node_ids: list[str]
    worker_ids: list[str]


class DataTransfer(_Model):
    from_node: str
    to_node: str
    from_worker: str
    to_worker: str
    transfer_type: TransferType = "s3"


class DistributionPlan(_Model):
    assignments: list[Assignment]
    phases: list[PlanPhase]
    data_transfers: list[DataTransfer]
    warnings: list[str]

    @classmethod
    def load(cls, document: Any) -> DistributionPlan:
        """From JSON text or parsed data, raising :class:`PlanValidationError`."""
        try:
            if isinstance(document, str | bytes | bytearray):
                return cls.model_validate_json(document)
            return cls.model_validate(document)
        except ValidationError as exc:
            raise PlanValidationError("distribution plan", problems_from_pydantic(exc)) from None

    def worker_of(self) -> dict[str, str]:
        """``node_id -> worker_id`` (for a study, the last trial's)."""
        return {a.node_id: a.worker_id for a in self.assignments}

    @property
    def is_local(self) -> bool:
        """An empty plan with a warning means: run locally instead."""
        return not self.assignments
