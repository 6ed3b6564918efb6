"""The ten variants of Soma's ``ExecutionPlan``, one small pydantic model each.

Why a module of its own: these are the plan's data, what every other part
of the scheduler reads (the checks, the walk, the runtime). Each variant
knows its own ids, its children in Soma's order and its serde wire form
(``to_wire``); how a raw JSON value is told apart into one of them is
:mod:`scheduler.model.plan_nodes`, and the whole-plan boundary (loading, errors)
is :mod:`scheduler.model.plan`.

Child fields are typed ``PlanNode``, the union defined in
:mod:`scheduler.model.plan_nodes`; the models that hold children are completed
(``model_rebuild``) there, once that union exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_serializer,
    model_validator,
)
from typing_extensions import TypedDict

NodeId = Annotated[str, Field(min_length=1, description="A node id; never empty.")]
#: Soma's executor runs a Loop with ``max_iterations: null`` at most this many passes.
SOMA_LOOP_CAP = 100
VARIANT_TAGS = (
    "Sequence",
    "Parallel",
    "Execute",
    "Step",
    "Loop",
    "Branch",
    "Remote",
    "Composite",
    "Stream",
    "Empty",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RemoteTarget(_Model):
    """Where a ``Remote`` plan must run: ``{"Tag": "gpu"}`` or ``{"WorkerId": "w1"}``."""

    tag: NodeId | None = Field(default=None, alias="Tag")
    worker_id: NodeId | None = Field(default=None, alias="WorkerId")

    @model_validator(mode="after")
    def _exactly_one(self) -> RemoteTarget:
        if (self.tag is None) == (self.worker_id is None):
            raise ValueError('a target is exactly one of {"Tag": "..."} or {"WorkerId": "..."}')
        return self

    @model_serializer(mode="plain")
    def _to_wire(self) -> dict[str, str]:
        if self.tag is not None:
            return {"Tag": self.tag}
        return {"WorkerId": self.worker_id or ""}

    def describe(self) -> str:
        """Human words for the target, as used in errors and reasons."""
        return f"tag '{self.tag}'" if self.tag is not None else f"worker '{self.worker_id}'"


class LoopCondition(_Model):
    """When a Loop stops: after the body's terminal node says so (default),
    when a named node signals, or only when ``max_iterations`` runs out."""

    type: Literal["BodyTerminal", "WhenSignaled", "Exhaust"] = "BodyTerminal"
    node: NodeId | None = None

    @model_validator(mode="after")
    def _node_iff_signaled(self) -> LoopCondition:
        if self.type == "WhenSignaled" and self.node is None:
            raise ValueError("WhenSignaled needs the signalling 'node'")
        if self.type != "WhenSignaled" and self.node is not None:
            raise ValueError(f"'{self.type}' takes no 'node'")
        return self

    @model_serializer(mode="plain")
    def _to_wire(self) -> dict[str, str]:
        if self.type == "WhenSignaled":
            return {"type": "WhenSignaled", "node": self.node or ""}
        return {"type": self.type}


class Variant(_Model):
    """Common surface of the ten plan variants.

    Unknown fields are kept aside, not refused: serde ignores them, so a plan
    from a newer Soma still loads (:func:`scheduler.model.notices.plan_warnings`
    names them once).
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    tag: ClassVar[str]

    def own_ids(self) -> list[str]:
        """The ids this variant names itself (not its children's)."""
        return []

    def children(self) -> list[PlanNode]:
        """Child plans in Soma's order."""
        return []

    def iter_node_ids(self) -> Iterator[str]:
        """Every node id in Soma's ``node_ids()`` order: own ids, then children."""
        stack: list[Variant] = [self]
        while stack:
            node = stack.pop()
            yield from node.own_ids()
            stack.extend(reversed(node.children()))

    def node_ids(self) -> list[str]:
        return list(self.iter_node_ids())

    def to_wire(self) -> Any:
        """This variant in serde's externally tagged JSON form."""
        raise NotImplementedError


class Execute(Variant):
    tag: ClassVar[str] = "Execute"
    node_id: NodeId

    def own_ids(self) -> list[str]:
        return [self.node_id]

    def to_wire(self) -> Any:
        return {"Execute": {"node_id": self.node_id}}


class Sequence(Variant):
    tag: ClassVar[str] = "Sequence"
    steps: list[PlanNode] = Field(default_factory=list)

    def children(self) -> list[PlanNode]:
        return self.steps

    def to_wire(self) -> Any:
        return {"Sequence": [s.to_wire() for s in self.steps]}


class Parallel(Variant):
    tag: ClassVar[str] = "Parallel"
    branches: list[PlanNode] = Field(default_factory=list)

    def children(self) -> list[PlanNode]:
        return self.branches

    def to_wire(self) -> Any:
        return {"Parallel": [b.to_wire() for b in self.branches]}


def _labelled_children(pairs: list[tuple[str, PlanNode]]) -> list[PlanNode]:
    return [plan for _, plan in pairs]


def _labelled_wire(pairs: list[tuple[str, PlanNode]]) -> list[Any]:
    return [[label, plan.to_wire()] for label, plan in pairs]


class Step(Variant):
    """A node that may hand control to one of its declared ``handoffs``."""

    tag: ClassVar[str] = "Step"
    node_id: NodeId
    handoffs: list[tuple[NodeId, PlanNode]] = Field(default_factory=list)

    def own_ids(self) -> list[str]:
        return [self.node_id]

    def children(self) -> list[PlanNode]:
        return _labelled_children(self.handoffs)

    def to_wire(self) -> Any:
        body: dict[str, Any] = {"node_id": self.node_id}
        if self.handoffs:
            body["handoffs"] = _labelled_wire(self.handoffs)
        return {"Step": body}


class Loop(Variant):
    tag: ClassVar[str] = "Loop"
    node_id: NodeId
    body: PlanNode
    max_iterations: Annotated[int, Field(ge=0)] | None = None
    until: LoopCondition = Field(default_factory=LoopCondition)
    carry_from: NodeId | None = None

    def own_ids(self) -> list[str]:
        return [self.node_id]

    def children(self) -> list[PlanNode]:
        return [self.body]

    @property
    def cap(self) -> int:
        """How many passes at most: ``max_iterations``, else Soma's cap."""
        return SOMA_LOOP_CAP if self.max_iterations is None else self.max_iterations

    def to_wire(self) -> Any:
        return {
            "Loop": {
                "node_id": self.node_id,
                "body": self.body.to_wire(),
                "max_iterations": self.max_iterations,
                "until": self.until.model_dump(),
                "carry_from": self.carry_from,
            }
        }


class Branch(Variant):
    tag: ClassVar[str] = "Branch"
    node_id: NodeId
    arms: list[tuple[NodeId, PlanNode]] = Field(default_factory=list)

    def own_ids(self) -> list[str]:
        return [self.node_id]

    def children(self) -> list[PlanNode]:
        return _labelled_children(self.arms)

    def labels(self) -> list[str]:
        return [label for label, _ in self.arms]

    def to_wire(self) -> Any:
        return {"Branch": {"node_id": self.node_id, "arms": _labelled_wire(self.arms)}}


class Remote(Variant):
    """Runs ``plan`` where ``target`` says; contributes no node id of its own."""

    tag: ClassVar[str] = "Remote"
    node_id: NodeId
    target: RemoteTarget
    plan: PlanNode

    def children(self) -> list[PlanNode]:
        return [self.plan]

    def to_wire(self) -> Any:
        return {
            "Remote": {
                "node_id": self.node_id,
                "target": self.target.model_dump(),
                "plan": self.plan.to_wire(),
            }
        }


class Composite(Variant):
    """Several nodes fused into one task, passing values in memory."""

    tag: ClassVar[str] = "Composite"
    node_ids_: list[NodeId] = Field(alias="node_ids", min_length=1)

    def own_ids(self) -> list[str]:
        return list(self.node_ids_)

    def to_wire(self) -> Any:
        return {"Composite": {"node_ids": list(self.node_ids_)}}


class Stream(Variant):
    """Nodes applied chunk by chunk (``chunk_size`` items at a time), in order.

    A ``chunk_size`` of 0 is one chunk: the whole input (Soma's ``chunk_value``)."""

    tag: ClassVar[str] = "Stream"
    node_ids_: list[NodeId] = Field(alias="node_ids", min_length=1)
    chunk_size: Annotated[int, Field(ge=0)]

    def own_ids(self) -> list[str]:
        return list(self.node_ids_)

    def to_wire(self) -> Any:
        return {"Stream": {"node_ids": list(self.node_ids_), "chunk_size": self.chunk_size}}


class Empty(Variant):
    tag: ClassVar[str] = "Empty"

    def to_wire(self) -> Any:
        return "Empty"


#: Every variant class by its serde tag.
VARIANTS: dict[str, type[Variant]] = {
    cls.tag: cls
    for cls in (Sequence, Parallel, Execute, Step, Loop, Branch, Remote, Composite, Stream, Empty)
}


# --- PlanNode: the ten variants as one externally tagged union ------------------------
# ``PlanNode``: the ten variants as one externally tagged union, as serde writes it.


def _tag_of(value: Any) -> str | None:
    """Which variant a raw value claims to be (None: not a plan at all)."""
    if isinstance(value, Variant):
        return value.tag
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        return key if isinstance(key, str) else None
    return None


def _passthrough(cls: type[Variant]) -> WrapValidator:
    """Accept an already built variant object as is; validate anything else."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return value if isinstance(value, cls) else handler(value)

    return WrapValidator(validate)


def _member(cls: type[Variant], payload: Any, build: Callable[[Any], Variant]) -> Any:
    wire = TypedDict(f"_{cls.tag}Wire", {cls.tag: payload})  # type: ignore[misc]
    return Annotated[
        Annotated[wire, AfterValidator(lambda d: build(d[cls.tag]))],
        _passthrough(cls),
        Tag(cls.tag),
    ]


def _empty_member() -> Any:
    return Annotated[
        Annotated[Literal["Empty"], AfterValidator(lambda _: Empty())],
        _passthrough(Empty),
        Tag("Empty"),
    ]


def _same(v: Any) -> Any:
    return v


_UNION = (
    _member(Sequence, list["PlanNode"], lambda steps: Sequence.model_construct(steps=steps)),
    _member(Parallel, list["PlanNode"], lambda bs: Parallel.model_construct(branches=bs)),
    _member(Execute, Execute, _same),
    _member(Step, Step, _same),
    _member(Loop, Loop, _same),
    _member(Branch, Branch, _same),
    _member(Remote, Remote, _same),
    _member(Composite, Composite, _same),
    _member(Stream, Stream, _same),
    _empty_member(),
)

if TYPE_CHECKING:
    PlanNode: TypeAlias = (
        Sequence | Parallel | Execute | Step | Loop | Branch | Remote | Composite | Stream | Empty
    )
else:
    PlanNode = Annotated[
        Union[_UNION],  # noqa: UP007 - built from a tuple at run time
        Discriminator(
            _tag_of,
            custom_error_type="unknown_variant",
            custom_error_message="not a plan variant",
        ),
        PlainSerializer(lambda v: v.to_wire(), return_type=Any),
    ]
# At module level on purpose: pydantic resolves the models' ``PlanNode`` in
# the namespace of the frame that calls model_rebuild, which is this module's.
for _cls in VARIANTS.values():
    _cls.model_rebuild()
