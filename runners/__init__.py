"""kv-parity runners: the replay parity protocol, grouped by kind (docs/architecture.md, "runners/")."""

import os

__version__ = "0.1.0"

# The statistics are medians, quantiles and resamples of a few thousand numbers: no BLAS call would use a second
# thread. numpy's OpenBLAS otherwise starts one per core when numpy is first imported, beside the
# pinned harness on a measuring node: 0.1 s of CPU per kv-parity process on two cores, more on a large runner.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
