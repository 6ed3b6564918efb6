"""Settings from the environment, the Celery app's configuration, and GPU detection."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from somatize_tasks import app as default_app
from somatize_tasks import create_app, settings_of
from somatize_tasks.config.keys import RedisKeys, queue_name
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.messaging.celery_app import celery_config
from somatize_tasks.workers.machine import detect_gpu


def test_env_is_read_when_built_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOMATIZE_REDIS_URL", "redis://:hunter2@redis.example:6380/3")
    monkeypatch.setenv("SOMATIZE_WORKER_TAGS", "gpu, training")
    monkeypatch.setenv("SOMATIZE_HEARTBEAT_INTERVAL_S", "1.5")
    settings = Settings.from_env(worker_id="w1")
    assert settings.worker_tags == ["gpu", "training"]
    assert settings.broker == settings.backend == "redis://:hunter2@redis.example:6380/3"
    assert settings.heartbeat_ttl_s == 4.5
    assert settings.worker_id == "w1"
    assert "hunter2" not in str(settings.redacted())


def test_overrides_beat_environment_and_bad_values_name_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOMATIZE_BROKER_URL", "amqp://guest@127.0.0.1:5672//")
    settings = Settings.from_env(result_backend="redis://127.0.0.1:6379/2")
    assert settings.broker.startswith("amqp://") and settings.backend.endswith("/2")
    with pytest.raises(ValidationError, match="heartbeat_interval_s"):
        Settings.from_env(heartbeat_interval_s=-1)
    with pytest.raises(ValidationError, match="worker_id"):
        Settings.from_env(worker_id="../etc")
    with pytest.raises(ValidationError, match="heartbeat_ttl_s"):
        Settings.from_env(heartbeat_interval_s=2, heartbeat_ttl_s=1)


def test_to_env_rebuilds_the_same_settings(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings.from_env() == settings


def test_redacted_url_hides_only_the_password() -> None:
    assert redacted_url("rediss://user:s3cr%40t@h:6380/0") == "rediss://user:***@h:6380/0"
    assert redacted_url("redis://h:6379/0") == "redis://h:6379/0"


def test_celery_config_is_json_only_with_events_and_late_acks(settings: Settings) -> None:
    config = celery_config(settings.model_copy(update={"visibility_timeout_s": 42.0}))
    assert config["accept_content"] == ["json"] and config["result_accept_content"] == ["json"]
    assert config["task_serializer"] == config["result_serializer"] == "json"
    assert config["worker_send_task_events"] and config["task_send_sent_event"]
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1
    assert config["broker_transport_options"] == {"visibility_timeout": 42.0}
    assert "somatize_tasks.transfer.tasks" in config["include"]


def test_rediss_urls_get_tls_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    config = celery_config(Settings(redis_url="rediss://:pw@h:6380/0", redis_ssl_ca_certs=ca))
    expected = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": str(ca)}
    assert config["broker_use_ssl"] == expected == config["redis_backend_use_ssl"]


def test_app_settings_are_bound_or_read_lazily(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(settings)
    assert settings_of(app) is settings
    assert app.conf.broker_url == settings.redis_url
    monkeypatch.setenv("SOMATIZE_HEARTBEAT_INTERVAL_S", "not a number")
    lazy = create_app()  # nothing is read yet, so nothing fails yet
    with pytest.raises(ValidationError, match="heartbeat_interval_s"):
        settings_of(lazy)
    assert default_app.main == "somatize_tasks"


def test_tasks_have_explicit_names(settings: Settings) -> None:
    app = create_app(settings)
    app.loader.import_default_modules()
    assert {"somatize.transfer.upload", "somatize.transfer.download"} <= set(app.tasks)


def test_queue_and_key_names_come_from_one_place() -> None:
    assert queue_name("gpu-1") == "somatize.w.gpu-1"
    keys = RedisKeys("p")
    assert (keys.workers_seen, keys.workers_info, keys.key("run", "r1")) == (
        "p:workers:seen",
        "p:workers:info",
        "p:run:r1",
    )


def _fake_smi(tmp_path: Path, output: str, code: int = 0) -> str:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {code}\n")
    smi.chmod(0o755)
    return f"{tmp_path}{os.pathsep}/usr/bin:/bin"


def test_gpu_detection_reads_nvidia_smi_and_cuda_visible_devices(tmp_path: Path) -> None:
    path = _fake_smi(tmp_path, "GPU 0: NVIDIA A100 (UUID: GPU-1)\\n")
    assert detect_gpu({"PATH": path}) is True
    assert detect_gpu({"PATH": path, "CUDA_VISIBLE_DEVICES": ""}) is False
    assert detect_gpu({"PATH": path, "CUDA_VISIBLE_DEVICES": "-1"}) is False
    assert detect_gpu({"PATH": path, "CUDA_VISIBLE_DEVICES": "0"}) is True
    assert detect_gpu({"PATH": str(tmp_path / "empty")}) is False
    broken = tmp_path / "broken"
    broken.mkdir()
    assert detect_gpu({"PATH": _fake_smi(broken, "No devices were found", 6)}) is False
