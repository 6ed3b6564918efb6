"""``python -m bench.faults``: the fault matrix (:mod:`testkit.faults.matrix`)."""

from testkit.faults.matrix import main

if __name__ == "__main__":
    raise SystemExit(main())
