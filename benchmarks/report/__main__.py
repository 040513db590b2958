"""``python -m benchmarks.report [--check]``: see :mod:`benchmarks.report`."""

from benchmarks.report import main

raise SystemExit(main())
