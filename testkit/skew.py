"""A host whose wall clock is wrong, for one child process: ``time.time()`` shifted.

:func:`skewed_env` writes a ``sitecustomize.py`` that Python imports at start-up
(before Celery, kombu or the project), which shifts ``time.time`` and
``time.time_ns`` by ``SKEW_SHIFT_S`` seconds. A worker or reaper started with
that environment lives on a clock that is off, as a host with a broken NTP would
be; its monotonic clock is untouched, as it would be there too.
"""

from __future__ import annotations

import os
from pathlib import Path

SHIM = '''"""Test shim: this process's wall clock is off by SKEW_SHIFT_S seconds."""
import os
import time

_shift = float(os.environ.get("SKEW_SHIFT_S") or 0)
if _shift:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift
    time.time_ns = lambda: _time_ns() + int(_shift * 1e9)
'''


def skewed_env(shift_s: float, root: Path) -> dict[str, str]:
    """Environment additions that start a Python process ``shift_s`` seconds off
    (``PYTHONPATH`` holds the shim's directory first)."""
    folder = root / "skew-shim"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SHIM)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "SKEW_SHIFT_S": repr(float(shift_s))}
