"""Bad input to the producer API: a clear error naming the field or node, before anything runs."""

from __future__ import annotations

import pytest

from scheduler import PlanValidationError
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import ArtifactIdError, PlanInputError, SomatizeError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import ex, seq


@pytest.mark.parametrize(
    ("node_id", "words"),
    [
        ("../etc", "contains '/'"),
        ("a/b", "contains '/'"),
        ("nul\x00byte", "NUL or control character"),
        ("x" * 300, "300 characters long"),
        ("..", "is not a valid id"),
    ],
)
def test_node_ids_that_could_escape_a_storage_prefix_are_refused(
    settings: Settings, node_id: str, words: str
) -> None:
    with pytest.raises(ArtifactIdError, match=words) as caught:
        submit_plan(seq(ex("rt_add"), ex(node_id)), settings=settings)
    assert "node id of plan node" in str(caught.value)


def test_params_for_a_node_the_plan_lacks_are_named(settings: Settings) -> None:
    with pytest.raises(PlanInputError, match="params names nodes the plan does not have: rt_typo"):
        submit_plan(ex("rt_add"), params={"rt_typo": {"k": 1}}, settings=settings)


def test_malformed_json_and_unknown_variants_name_the_problem(settings: Settings) -> None:
    with pytest.raises(PlanValidationError, match="Invalid JSON"):
        submit_plan('{"Sequence": [', settings=settings)
    with pytest.raises(
        PlanValidationError, match=r"Sequence\[1\]: .*'Nope'.* is not a plan variant"
    ):
        submit_plan({"Sequence": [ex("a"), {"Nope": {}}]}, settings=settings)


def test_a_duplicate_node_id_is_named(settings: Settings) -> None:
    with pytest.raises(PlanValidationError, match="node id 'a' is used twice"):
        submit_plan(seq(ex("a"), ex("a")), settings=settings)


def test_a_run_id_with_path_characters_is_refused(settings: Settings) -> None:
    with pytest.raises(ArtifactIdError, match="run id"):
        PlanRun.attach("../../etc/passwd", settings)


@pytest.mark.slow
def test_a_large_input_goes_through_the_store_and_an_unreachable_store_is_named(
    settings: Settings, two_workers: object
) -> None:
    dead_s3 = settings.model_copy(
        update={"s3_endpoint_url": "http://127.0.0.1:9", "transfer_max_retries": 0}
    )
    big = list(range(50_000))  # far over the inline limit: never carried in a message
    with pytest.raises(SomatizeError) as caught:
        submit_plan(ex("rt_size"), input=big, settings=dead_s3, require_workers=True)
    message = str(caught.value)
    assert "http://127.0.0.1:9" in message and settings.s3_bucket in message
    assert "testing-secret" not in message
