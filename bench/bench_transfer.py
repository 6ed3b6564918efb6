"""A 256 MB array through the artifact store's upload and download, against bare boto3.

Starts moto's S3 server in a subprocess (or uses ``--endpoint-url``), then
in one run, alternating, ``--repeat`` times each:

- store: ``ArtifactStore.upload`` on worker A (value already encoded in
  A's cache by ``put``), then ``ArtifactStore.download`` into worker B's cache;
- bare: ``boto3`` ``upload_file`` and ``download_file`` of the same file
  with boto3's default transfer settings.

Prints MB/s (median of the repeats) and the store/bare ratio (goal >= 0.9).

    python bench/bench_transfer.py [--mb 256] [--repeat 3] [--endpoint-url URL]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import numpy as np

from somatize_tasks.config.settings import Settings
from somatize_tasks.store import ArtifactStore


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action`` took."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--endpoint-url")
    parser.add_argument("--bucket", default="somatize-bench")
    args = parser.parse_args()

    moto = None
    endpoint = args.endpoint_url
    if endpoint is None:
        moto, endpoint = start_moto()
    work = Path(tempfile.mkdtemp(prefix="somatize-bench-"))
    try:
        settings = Settings(
            store_kind="s3",
            s3_endpoint_url=endpoint,
            s3_bucket=args.bucket,
            s3_access_key_id="bench",
            s3_secret_access_key="bench-secret",
            cache_dir=work / "cache",
            s3_prefix="bench",
        )
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench-secret",
        )
        client.create_bucket(Bucket=args.bucket)

        value = np.random.default_rng(0).random(args.mb * 1024 * 1024 // 8)
        source = ArtifactStore(settings, "bench-a")
        store_up, store_down, bare_up, bare_down = [], [], [], []
        for round_ in range(args.repeat):
            run_id = f"run-{uuid.uuid4().hex[:8]}"
            ref = source.put(run_id, "big", 0, value)
            target = ArtifactStore(settings, f"bench-b{round_}")
            store_up.append(timed(lambda ref=ref: source.upload(ref)))
            store_down.append(timed(lambda ref=ref, target=target: target.download(ref)))
            assert target.cache.has(ref.key, ref.size)

            path = str(source.cache.path_for(ref.key))
            bare_key, bare_copy = f"bare/{run_id}", str(work / f"bare-{round_}.npy")
            bare_up.append(
                timed(lambda path=path, key=bare_key: client.upload_file(path, args.bucket, key))
            )
            bare_down.append(
                timed(
                    lambda key=bare_key, copy=bare_copy: client.download_file(
                        args.bucket, key, copy
                    )
                )
            )
            assert Path(bare_copy).stat().st_size == ref.size
            for key in (f"bench/{ref.key}", bare_key):
                client.delete_object(Bucket=args.bucket, Key=key)
            Path(bare_copy).unlink()
            source.delete_run(run_id)
            shutil.rmtree(target.cache.root, ignore_errors=True)

        size_mb = ref.size / 1e6
        print(f"{size_mb:.0f} MB array (.npy), endpoint {endpoint}, median of {args.repeat}")
        print(f"{'':>10} {'store MB/s':>11} {'bare MB/s':>10} {'ratio':>6}")
        for label, mine, bare in (
            ("upload", store_up, bare_up),
            ("download", store_down, bare_down),
        ):
            ours, theirs = size_mb / statistics.median(mine), size_mb / statistics.median(bare)
            print(f"{label:>10} {ours:>11.1f} {theirs:>10.1f} {ours / theirs:>6.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if moto is not None:
            moto.kill()
            moto.wait()


if __name__ == "__main__":
    main()
