"""Overlapped launches: CUDA's programmatic dependent launch (PDL) for kernels that run back
to back on one stream, each reading what the one before wrote.

A kernel launched *dependent* (Triton's ``launch_pdl=True``) may start while the kernel
before it on the stream still runs, once every program of that kernel has called
``gdc_launch_dependents()`` (or ended). Each of its programs calls ``gdc_wait()`` before it
touches memory; the wait returns when the kernel before has finished and its writes are
visible. What it saves is the gap between two launches: the next kernel's programs are
already placed and waiting when the one before ends (1-3 us a pair on an H200: the column
table of :mod:`opspec.kernels.reduction` and docs/ops.md quote the measurements).

Every kernel opspec launches takes part: it has a ``PDL`` constexpr and calls
:func:`overlap_start` first thing (the wait, then the trigger, so the next kernel may be
placed as soon as this one's last programs are running), and its launcher passes
:func:`overlap_options`. So the kernels of one op chain, and so do those of consecutive
ops (``benchmarks/chain_probe.py`` times decode layers with the overlap off and on).
``opspec.kernels.launch.launch`` refuses a kernel with a ``PDL`` parameter whose launch
does not pass one. The wait makes
any order safe: a dependent kernel after a kernel that never triggers (torch's, say)
starts when that one ends, as a plain launch would; and since each kernel ends only after
its own wait returned, a chain of them orders as plain launches do. A dependent launch
must only ever go to a kernel that waits before its first memory access:
:func:`overlap_options` gives both together or neither.

The instructions exist from sm_90 (Hopper) on; :func:`overlap_supported` says whether a
device, this Triton build and the mode (not Triton's interpreter) have them. CUDA graphs
capture a dependent launch as a programmatic edge, so captured kernels overlap too.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from opspec.kernels.devices import TRITON_INTERPRETED
from opspec.schema.settings import pdl_enabled

try:  # Triton builds without them: no overlapped launches
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - depends on the Triton build
    gdc_launch_dependents = gdc_wait = None

__all__ = ["ENABLED", "gdc_launch_dependents", "gdc_wait", "overlap_options", "overlap_start",
           "overlap_supported"]

#: ``OPSPEC_PDL=0`` in the environment turns the overlap off (plain launches everywhere).
ENABLED = pdl_enabled()


@triton.jit
def overlap_start(PDL: tl.constexpr):
    """A kernel's first statement: with PDL, wait for the kernel before on the stream (a
    no-op unless launched dependent), then let the next one be placed."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


_ON = {"PDL": True, "launch_pdl": True}
_OFF = {"PDL": False}


def overlap_options(device: torch.device) -> dict:
    """The launch keywords of a kernel with a ``PDL`` constexpr on `device`: built to wait
    and launched dependent where :func:`overlap_supported`, else neither. The dict is
    shared between calls (launchers unpack it with ``**``): do not change it."""
    return _ON if overlap_supported(device) else _OFF


def overlap_supported(device: torch.device) -> bool:
    """Whether kernels on `device` are launched overlapped: a CUDA device of compute
    capability 9.0 or later, a Triton build with the grid-dependency ops, not Triton's
    interpreter, and :data:`ENABLED`."""
    if not ENABLED or device.type != "cuda" or TRITON_INTERPRETED or gdc_wait is None:
        return False
    return _capable(torch.cuda.current_device() if device.index is None else device.index)


@functools.lru_cache(maxsize=None)
def _capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)
