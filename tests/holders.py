"""Several holders of rows in one process, for tests: threads that reduce through a barrier
(a reducer for :mod:`jaxtree.collective`, like :class:`jaxtree.distributed.ProcessReducer`)."""

import threading

import jax
import numpy as np


class ThreadReducer:
    """The reducer of holder ``index`` of ``size`` threads sharing ``state``."""

    def __init__(self, state, index, size):
        self.state, self.index, self.size = state, index, size
        self.reductions = 0

    def _reduce(self, array, op):
        state = self.state
        state["parts"][self.index] = np.asarray(array)
        state["barrier"].wait()
        out = op(np.stack(state["parts"]), axis=0)
        state["barrier"].wait()
        self.reductions += 1
        return out

    def sum(self, array):
        return self._reduce(array, np.sum)

    def max(self, array):
        return self._reduce(array, np.max)

    def min(self, array):
        return self._reduce(array, np.min)

    def gather(self, array):
        array = np.asarray(array)
        slot = np.zeros((self.size,) + array.shape, array.dtype)
        slot[self.index] = array
        return self.sum(slot)


def blocks(n, size):
    """``size`` contiguous row ranges of unequal lengths (the last one may be empty)."""
    cuts = np.linspace(0, n, size + 1).astype(int)
    cuts[1:-1] = np.minimum(cuts[1:-1] + n // (2 * size), n)
    return [slice(cuts[i], cuts[i + 1]) for i in range(size)]


def holder_outcomes(size, fn, *arrays):
    """Per holder, ``fn(*its blocks of arrays, reducer)`` or the exception it raised; the holders
    run as threads on contiguous blocks of the rows (:func:`blocks`)."""
    # a holder that fails alone leaves the others waiting: the timeout ends the wait
    state = {"parts": [None] * size, "barrier": threading.Barrier(size, timeout=300)}
    outcomes = [None] * size
    rows = blocks(len(arrays[0]), size)
    x64 = jax.config.jax_enable_x64          # the caller's setting (thread-local)

    def work(index):
        try:
            with jax.enable_x64(x64):
                outcomes[index] = fn(*(None if a is None else a[rows[index]] for a in arrays),
                                     ThreadReducer(state, index, size))
        except Exception as error:  # noqa: BLE001 - handed to the caller
            outcomes[index] = error

    threads = [threading.Thread(target=work, args=(i,)) for i in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def run_holders(size, fn, *arrays):
    """:func:`holder_outcomes`, raising the first exception (one not caused by another holder's
    failure, if any)."""
    outcomes = holder_outcomes(size, fn, *arrays)
    errors = [o for o in outcomes if isinstance(o, Exception)]
    if errors:
        raise ([e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
               or errors)[0]
    return outcomes
