"""``WorkerInfo``: what a worker's heartbeat says about it (Soma's wire form)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from scheduler.errors import FieldProblem, PlanValidationError
from scheduler.model.validation import problems_from_pydantic

Count = Annotated[int, Field(ge=0)]


class WorkerInfo(BaseModel):
    """A worker's capabilities and current load.

    ``available_slots`` is the capacity side of placement: a worker reporting
    more active jobs than its limit is full, not negative.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(min_length=1)]
    name: str
    tags: list[str] = Field(default_factory=list)
    gpu: bool = False
    cpu_cores: Count = 1
    active_jobs: Count = 0
    max_concurrent: Count = 1

    @property
    def available_slots(self) -> int:
        """How many more jobs this worker can take right now (never negative)."""
        return max(0, self.max_concurrent - self.active_jobs)

    @property
    def has_capacity(self) -> bool:
        return self.available_slots > 0

    def matches_tag(self, tag: str) -> bool:
        return tag in self.tags


_WORKER_LIST = TypeAdapter(list[WorkerInfo])


def load_workers(document: Any) -> list[WorkerInfo]:
    """A worker list from JSON text or parsed data; errors name the bad field.

    Worker ids must be unique: assignments refer to workers by id.
    """
    try:
        if isinstance(document, str | bytes | bytearray):
            workers = _WORKER_LIST.validate_json(document)
        else:
            workers = _WORKER_LIST.validate_python(document)
    except ValidationError as exc:
        raise PlanValidationError("worker list", problems_from_pydantic(exc)) from None
    check_unique_ids(workers)
    return workers


def check_unique_ids(workers: list[WorkerInfo]) -> None:
    """Assignments name workers by id, so two workers may not share one."""
    seen: set[str] = set()
    for index, worker in enumerate(workers):
        if worker.id in seen:
            problem = FieldProblem(f"[{index}].id", f"worker id '{worker.id}' is used twice")
            raise PlanValidationError("worker list", [problem])
        seen.add(worker.id)
