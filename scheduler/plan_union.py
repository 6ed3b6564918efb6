"""``PlanNode``: the ten variants as one externally tagged union, as serde writes it.

Why a module of its own: telling a raw JSON value apart into the right
variant is the delicate part of the wire format, and pydantic builds it
once, here. serde writes every variant as an object with one key, the
variant's name (``{"Execute": {"node_id": "a"}}``), except the unit variant
``"Empty"``, a bare string. Each member of the union reads that one-key
form into its model (:mod:`scheduler.plan_nodes`) and passes an already
built model through untouched; a value naming no variant is the error
``unknown_variant``. Writing goes through each model's ``to_wire``.

The models with child plans are completed here (``model_rebuild``), as soon
as ``PlanNode`` exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import (
    AfterValidator,
    Discriminator,
    PlainSerializer,
    Tag,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from typing_extensions import TypedDict

from scheduler.plan_nodes import (
    VARIANTS,
    Branch,
    Composite,
    Empty,
    Execute,
    Loop,
    Parallel,
    Remote,
    Sequence,
    Step,
    Stream,
    Variant,
)


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
