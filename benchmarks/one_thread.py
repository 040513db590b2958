"""Imported first by a benchmark that must run single-threaded: one thread for each BLAS/OpenMP pool, unless the
caller set its own. The pools read these variables once, when numpy or torch loads, so this import has to come
before theirs (an import, not a statement among the imports, keeps the module's imports at its top)."""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
