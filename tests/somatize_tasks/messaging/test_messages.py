"""Messages on real workers: forged, unsigned, wrong-key and malformed ones are refused.

Signed workers run under a key prefix (and queues) of their own, with a
current key and one previous key; the malformed-message worker is unsigned,
so what refuses those messages there is the shape check alone.
"""

from __future__ import annotations

import base64
import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from pydantic import SecretStr
from redis import Redis

from somatize_tasks.config.keys import NODE_TASK, TRANSFER_FAILED_TASK, queue_name
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import MessageKeyError
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.messaging.signing import key_id
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import MAKE_SUM, ex, remote, seq
from testkit.services import wait_for
from testkit.workers import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow
KEY = "current-key-" + "k" * 20
OLD_KEY = "previous-key-" + "p" * 20
OTHER_KEY = "someone-elses-key-" + "x" * 20


def _cleanup(settings: Settings, prefix: str) -> None:
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"*{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def signed(settings: Settings) -> Iterator[Settings]:
    prefix = f"{settings.key_prefix}-sg"
    yield settings.model_copy(
        update={
            "key_prefix": prefix,
            "worker_id": f"{prefix}-producer",
            "fuse_chains": False,
            "message_key": SecretStr(KEY),
            "message_keys_previous": [SecretStr(OLD_KEY)],
        }
    )
    _cleanup(settings, prefix)


@pytest.fixture(scope="module")
def signed_worker(
    signed: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    factory = WorkerFactory(signed, tmp_path_factory.mktemp("signed-workers"))
    try:
        worker = factory.start("signed", tags="cpu", wait=False)
        factory.start("signed-gpu", tags="gpu", wait=False)
        for started in factory.started:
            factory.wait_live(started)
        yield worker
    finally:
        factory.close()


def _refused(worker: WorkerProcess, task_id: str) -> str | None:
    for line in worker.log().splitlines():
        if "refused message" in line and task_id in line:
            return line
    return None


def _stranger(settings: Settings, key: str | None) -> Celery:
    """A producer app over the same broker, signing with ``key`` (or not at all)."""
    update: dict[str, Any] = {
        "message_key": SecretStr(key) if key else None,
        "message_keys_previous": [],
    }
    return create_app(settings.model_copy(update=update))


def _block_of(settings: Settings, run_id: str, node_id: str) -> int:
    program = run_context(create_app(settings), settings).program(run_id)
    assert program is not None
    return next(b.index for b in program.blocks if b.task_node_ids() == [node_id])


def test_a_forged_node_message_for_a_block_not_yet_dispatched_does_not_change_the_run(
    signed: Settings, signed_worker: WorkerProcess
) -> None:
    run = submit_plan(
        seq(ex("rt_sleep"), ex("rt_add")),
        input=1,
        params={"rt_sleep": {"s": 1.5}},
        settings=signed,
        require_workers=True,
    )
    later = _block_of(signed, run.id, "rt_add")
    forged = str(uuid.uuid4())
    _stranger(signed, None).send_task(
        NODE_TASK,
        kwargs={"run_id": run.id, "block": later, "epoch": 0, "input": {"value": ["FORGED"]}},
        queue=queue_name(signed_worker.worker_id),
        task_id=forged,
    )
    assert run.wait(timeout=30) == 2
    line = _refused(signed_worker, forged)
    assert line is not None and "somatize.node.run" in line and "unsigned" in line, line


def test_a_forged_transfer_failed_does_not_fail_the_run(
    signed: Settings, signed_worker: WorkerProcess
) -> None:
    run = submit_plan(
        ex("rt_sleep"),
        input=5,
        params={"rt_sleep": {"s": 1.5}},
        settings=signed,
        require_workers=True,
    )
    state = run_context(create_app(signed), signed).state(run.id)
    task_id = json.loads(state.client.hget(state.nodes, "rt_sleep") or "{}").get("task_id")
    assert task_id  # what a forger reads from Redis to aim at the block
    forged = str(uuid.uuid4())
    _stranger(signed, OTHER_KEY).send_task(
        TRANSFER_FAILED_TASK,
        args=[{}, "chosen text", None, run.id, 0, 0, task_id],
        queue=queue_name(signed_worker.worker_id),
        task_id=forged,
    )
    assert run.wait(timeout=30) == 5
    line = _refused(signed_worker, forged)
    assert line is not None and "bad signature" in line, line


def test_messages_signed_with_a_previous_key_are_accepted(
    signed: Settings, signed_worker: WorkerProcess
) -> None:
    old_producer = signed.model_copy(
        update={
            "message_key": SecretStr(OLD_KEY),
            "message_keys_previous": [],
        }
    )
    run = submit_plan(
        seq(ex("rt_add"), ex("rt_double")), input=1, settings=old_producer, require_workers=True
    )
    assert run.wait(timeout=30) == 4
    assert "task messages are signed" in signed_worker.log()
    assert KEY not in signed_worker.log() and OLD_KEY not in signed_worker.log()


def test_a_value_crossing_workers_travels_in_signed_chains(
    signed: Settings, signed_worker: WorkerProcess
) -> None:
    """A pull (workers with a key serve their values: a direct transfer) with its
    transfer_failed errback: signed by the worker that publishes it. The S3 chain
    (upload -> download -> input_ready) a failed pull falls back on is signed the same
    way (runtime/engine/test_direct_transfers.py runs one between keyed workers)."""
    refused_before = signed_worker.log().count("refused message")
    run = submit_plan(
        seq(remote("cpu", ex("rt_make")), remote("gpu", ex("rt_sum"))),
        settings=signed,
        require_workers=True,
    )
    assert run.wait(timeout=60) == MAKE_SUM
    assert any(t["transfer_type"] == "peer" for t in run.status().transfers)
    assert signed_worker.log().count("refused message") == refused_before


def test_remote_control_commands_need_the_key_too(
    signed: Settings, signed_worker: WorkerProcess
) -> None:
    """A harmless command (ping), aimed at this worker only: the fanout reaches every
    worker on this Redis, and only the destination may act on it."""
    node = f"{signed_worker.worker_id}@{socket.gethostname()}"
    assert create_app(signed).control.ping(destination=[node], timeout=3) == [
        {node: {"ok": "pong"}}
    ]
    assert _stranger(signed, None).control.ping(destination=[node], timeout=1) == []
    assert _stranger(signed, OTHER_KEY).control.ping(destination=[node], timeout=1) == []
    log = signed_worker.log()
    assert "refused control command ping: unsigned (no somatize_signature header); ignored" in log
    assert "refused control command ping: bad signature" in log


def test_cancel_reaches_a_signed_worker(signed: Settings, signed_worker: WorkerProcess) -> None:
    """``PlanRun.cancel``'s revoke is a signed control command: the node is terminated."""
    run = submit_plan(
        ex("rt_sleep"),
        input=1,
        params={"rt_sleep": {"s": 20}},
        settings=signed,
        require_workers=True,
    )
    assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 20)
    state = run_context(create_app(signed), signed).state(run.id)
    task_id = json.loads(state.client.hget(state.nodes, "rt_sleep") or "{}")["task_id"]
    assert run.cancel()
    assert wait_for(lambda: f"Terminating {task_id}" in signed_worker.log(), 10), (
        signed_worker.log()[-2000:]
    )


# --- malformed messages ---------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_worker(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    prefix = f"{settings.key_prefix}-mf"
    own = settings.model_copy(update={"key_prefix": prefix, "worker_id": f"{prefix}-producer"})
    factory = WorkerFactory(own, tmp_path_factory.mktemp("malformed-workers"))
    try:
        yield factory.start("plain", tags="cpu")
    finally:
        factory.close()
        _cleanup(settings, prefix)


def _envelope(
    queue: str, task_id: str, body: bytes, content_type: str, headers: dict[str, Any] | None = None
) -> str:
    """A kombu Redis envelope, as a producer that bypasses Celery would push it."""
    if headers is None:
        headers = {"lang": "py", "task": NODE_TASK, "id": task_id, "root_id": task_id}
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": content_type,
            "headers": headers,
            "properties": {
                "correlation_id": task_id,
                "delivery_mode": 2,
                "delivery_tag": str(uuid.uuid4()),
                "body_encoding": "base64",
                "priority": 0,
                "delivery_info": {"exchange": "", "routing_key": queue},
            },
        }
    )


MALFORMED = {
    "list-of-one": (b"[1]", "application/json", "body is not [args, kwargs, embed]"),
    "no-content-type": (b"[[], {}, {}]", "", "no content type"),
    "not-json": (b"{not json", "application/json", "undecodable body"),
    "too-long": (b"[[], {}, {}, 4]", "application/json", "body is not [args, kwargs, embed]"),
    "pickle": (b"\x80\x04K\x01.", "application/x-python-serialize", "undecodable body"),
}


RAW_ITEMS = [
    "{not json",
    "[1]",
    '{"body": 1}',
    '{"body": "!", "properties": '
    '{"delivery_tag": "t", "delivery_info": {}, "body_encoding": "base64"}}',
]


def test_malformed_messages_are_refused_in_one_line_and_the_worker_keeps_working(
    settings: Settings, plain_worker: WorkerProcess
) -> None:
    client = Redis.from_url(settings.redis_url)
    ids = {name: str(uuid.uuid4()) for name in MALFORMED}
    for name, (body, content_type, _) in MALFORMED.items():
        client.lpush(
            plain_worker.queue, _envelope(plain_worker.queue, ids[name], body, content_type)
        )
    headerless = str(uuid.uuid4())
    client.lpush(
        plain_worker.queue,
        _envelope(plain_worker.queue, headerless, b"[1]", "application/json", {}),
    )
    for raw in RAW_ITEMS:  # not even an envelope kombu can read
        client.lpush(plain_worker.queue, raw)
    headerless_line = "refused message ? id=?: not a task message (no task or id header)"
    raw_line = "refused a malformed item on the broker"

    def all_refused() -> bool:
        # The worker takes them in the order they were pushed; wait for the last kind too.
        log = plain_worker.log()
        return (
            all(_refused(plain_worker, i) for i in ids.values())
            and headerless_line in log
            and log.count(raw_line) == len(RAW_ITEMS)
        )

    assert wait_for(all_refused, 15), plain_worker.log()[-3000:]
    for name, (_, _, reason) in MALFORMED.items():
        assert reason in (_refused(plain_worker, ids[name]) or ""), name
    assert "Unrecoverable error" not in plain_worker.log()
    assert plain_worker.proc.poll() is None
    own = settings.model_copy(
        update={
            "key_prefix": plain_worker.settings.key_prefix,
            "worker_id": f"{plain_worker.settings.key_prefix}-p",
        }
    )
    run = submit_plan(
        seq(ex("rt_add"), ex("rt_double")), input=1, settings=own, require_workers=True
    )
    assert run.wait(timeout=30) == 4
    assert client.llen(plain_worker.queue) == 0  # dropped, not put back
    assert plain_worker.log().count(raw_line) == len(RAW_ITEMS)  # and no more since
    assert plain_worker.proc.poll() is None
    assert "task messages are unsigned" in plain_worker.log()


@pytest.mark.parametrize(
    ("key", "expected"), [(None, "has no SOMATIZE_MESSAGE_KEY"), (OTHER_KEY, "signs with key id")]
)
def test_a_producer_whose_key_the_workers_refuse_is_told_at_submit(
    signed: Settings, signed_worker: WorkerProcess, key: str | None, expected: str
) -> None:
    producer = signed.model_copy(
        update={
            "message_key": SecretStr(key) if key else None,
            "message_keys_previous": [],
        }
    )
    plan = remote("cpu", seq(ex("n1")))
    with pytest.raises(MessageKeyError) as raised:
        submit_plan(plan, input=1, settings=producer)
    message = str(raised.value)
    assert signed_worker.worker_id in message and expected in message
    assert key_id(KEY.encode()) in message and KEY not in message and OLD_KEY not in message
    if key is not None:
        assert key not in message
