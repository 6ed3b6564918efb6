"""A producer process for the fault matrix: submit a plan ``--count`` times, say so.

``python -m testkit.faults.producer PLAN.json [--count N]`` reads a JSON file
``{"plan": ..., "params": ...}``, calls ``submit_plan`` (settings from the
``SOMATIZE_*`` the harness set) and prints ``RUN <id>`` the moment each call
returns, then ``DONE``. The harness kills it before or after a return.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from somatize_tasks import submit_plan
from testkit.nodes import faults_nodes  # noqa: F401  (the catalog: names are checked at submit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--count", type=int, default=1)
    args = parser.parse_args()
    document = json.loads(args.plan.read_text())
    for _ in range(args.count):
        run = submit_plan(document["plan"], params=document.get("params"), require_workers=True)
        print(f"RUN {run.id}", flush=True)
    print("DONE", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
