"""The arrival count of the cooperative kernels (``coop`` in :mod:`opspec.kernels.norm` and
:mod:`opspec.kernels.softmax`): the programs of one row each publish a partial result to a
workspace, count themselves in on the row's counter and wait for the others."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["arrive_and_wait"]


@triton.jit
def arrive_and_wait(count_ptr, parts, spin):
    """Count this program in at ``count_ptr`` (a row's arrival count, zeroed before the
    launch) and poll it until ``parts`` programs have arrived or ``spin`` polls have
    passed; return the count last seen (``>= parts``: every partial is published).

    The increment releases: the partials this program stored before it are visible to any
    program that sees the new count. The polls acquire: once the count reaches ``parts``,
    every program's partials are visible here -- read them with ``volatile=True``, since
    L1 may still hold an older copy of their line. A caller whose count stays short (its
    peers not resident, or ``spin == 0`` under the interpreter) must not wait on; the
    kernels compute the row's statistics themselves then."""
    done = tl.atomic_add(count_ptr, 1, sem="acq_rel") + 1
    polls = 0
    while (done < parts) & (polls < spin):
        done = tl.atomic_add(count_ptr, 0, sem="acquire")
        polls += 1
    return done
