"""NumPy's and SciPy's BLAS on one thread, for code whose matrix products are small.

On more than one thread such products only wait for each other, and the pool's idle threads go on spinning after
each call, on the cores that torch's threads (or other workers) need. Measured on the 2-core development machine:
the F0 tracker (a frame's NCCF, the NLFER of one utterance) ran 2-3x longer on a busy machine; with NumPy's pool
on both cores, GE2E (its front end's mel filterbank product) took 1.8x the CPU for a batch of 16 embeddings and
2.4x the time one at a time, and Whisper's decoding 6 % more time (``benchmarks/evaluate.py --blas-comparison``).
BLAS splits a product over rows and columns, never along the sum, so the values are the same on one thread.
"""
from __future__ import annotations

import contextlib
import functools
import sys


def one_blas_thread() -> contextlib.AbstractContextManager:
    """While the returned context lasts, the BLAS libraries this process has loaded compute on one thread (torch's
    own pools are not BLAS libraries to threadpoolctl and keep their threads)."""
    return _blas_pools("scipy.linalg" in sys.modules).limit(limits=1, user_api="blas")


@functools.lru_cache(maxsize=2)
def _blas_pools(scipy_blas_loaded: bool):
    """A controller of the BLAS libraries loaded when it is made: SciPy's own (which numba's ``np.dot`` calls) may
    load after NumPy's, so there is one for each case. Found once, a limit costs 0.03 ms where threadpoolctl's
    ``threadpool_limits`` takes 0.7 ms to find the libraries again."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
