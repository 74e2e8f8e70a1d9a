"""Softmax and log-softmax along one axis: ``torch.softmax`` / ``torch.log_softmax``.

Plain functions; the dispatch classes are in :mod:`opspec.kernels.softmax_impl`.

* :func:`softmax_reference` -- the torch reference (fp32 math, cast back).
* :func:`softmax_triton` -- the Triton kernels, writing into a contiguous ``out``.
* :func:`softmax_plan` -- which kernel and which block sizes a shape gets (plain Python,
  no autotuning at call time).

The input is viewed as ``[outer, N, inner]`` around the normalised axis (``N`` its length):
a view when the strides allow it, else ``reshape`` copies it (a tensor whose leading or
trailing axes cannot be merged, e.g. a permuted 4-D tensor). Every kernel reads the
input through its strides and works in fp32; when the output dtype differs from the
input's (the ``dtype`` argument of torch), each loaded value is first rounded to the
output dtype, as torch casts the input before the op. Five kernels:

``rows``
    ``inner == 1`` and a row of at most ``max_reg`` (16384) elements: the row stays in
    registers, one read and one write, ``ROWS`` short rows per program; about 8 elements
    per thread (16 at 8192, 32 at 16384).
``coop``
    ``inner == 1``, long rows (vocabulary logits) and enough rows to fill the GPU: each
    row is cut into ``C`` chunks of ``BLOCK`` (8192) elements, one program per chunk, and
    the ``C`` programs of a row cooperate: each keeps its chunk in registers (32 fp32 a
    thread at 8 warps; 64 registers, 4 programs per SM), publishes the chunk's (max, sum),
    waits on the row's arrival count and writes its chunk from registers. One read and one
    write of HBM. This replaced ``looped`` for these rows: measured on an H200, ``looped``
    ran bf16 Llama-3 logits (4096 x 128256) and fp32 Qwen2.5 logits (1024 x 151936) at
    2.66 TB/s, which is what a second read from HBM gives (1.5x the bytes at about 4 TB/s):
    its L2 working set is one row per SM, 132 x 250 KiB = 33 MB (bf16) and 132 x 594 KiB
    = 78 MB (fp32), beside the output stream, against 50 MB of L2. Here the data held
    between read and write is in registers (32K elements per SM: 64 KiB bf16, 128 KiB
    fp32) and L2 only carries the small partials. Rows of more than 64 chunks take
    ``looped``.
``looped``
    ``inner == 1``, rows longer than 64 x 8192 elements, enough rows to fill the GPU: a
    persistent grid of one program per SM, each taking whole rows. Pass 1 streams the row
    once, keeping a running max and sum per group of ``VEC`` contiguous elements (one
    16-byte vector, so the group's max is a reduction inside one thread and ``exp`` of
    the rescale runs once per ``VEC`` elements); pass 2 reads the row again in reverse
    chunk order and writes it. With one row per SM in flight (132 x 250 KiB for bf16
    Llama-3 logits, about 33 MB) the re-read is served by the 60 MB L2: the first
    pass loads with ``evict_last``, the second and the stores with ``evict_first``.
    Chunks are 32 KB of input; each loop loads its next chunk ahead, so two are in
    flight per SM.
``split``
    ``inner == 1``, long rows but too few rows to fill the GPU (decode): each row is cut
    into ``C`` chunks of ``CHUNK`` elements; one kernel writes each chunk's (max, sum)
    to a small fp32 workspace, a second combines a row's partials and rewrites its chunk
    (the re-read hits L2: the whole input is a few MB).
``strided``
    ``inner > 1`` (``dim`` is not the last axis, which is contiguous): tiles of
    ``[BLOCK_N, BLOCK_I]`` (at most 8192 elements) with the ``inner`` axis across the
    threads (coalesced loads), reduced over ``N``. When the column does not fit, the tile
    loops over ``N`` in two passes (the second in reverse), its strips narrowed (down to
    16 columns) so that those in flight stay in L2.

Masking and special values follow torch: a slice of ``-inf`` only gives NaN (as
``exp(-inf - -inf)`` does in torch), an ``inf`` or NaN in a slice gives NaN there. The
running maxima of the looped kernels start at ``-FLT_MAX`` rather than ``-inf`` so that
a chunk holding only ``-inf`` contributes nothing instead of NaN.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

__all__ = [
    "SoftmaxPlan",
    "softmax_plan",
    "softmax_reference",
    "softmax_triton",
]

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_INT32_LIMIT = 2**31 - 1
#: Elements of one slice a program keeps in registers (fp32 after the load).
MAX_REG_ELEMS = 16384
#: An H200 has 132 SMs; used where the device does not say (the CPU interpreter).
DEFAULT_SM_COUNT = 132
#: Bytes of column strips / rows in flight that the looped kernels plan to keep in L2
#: (60 MB on an H200; the rest is left to the outputs and other traffic).
_L2_BUDGET = 32 * 2**20
#: Bytes of input one program of the looped kernel loads per chunk (16384 bf16 elements,
#: 32 per thread at 16 warps); with the next chunk loaded ahead, 64 KB in flight per SM.
_LOOP_CHUNK_BYTES = 32 * 1024
#: Chunk of one program of the cooperative kernel (``coop``), held in registers: 32 fp32
#: values a thread at 8 warps.
_COOP_BLOCK = 8192
#: Most programs cooperating on one row (all of a row's programs must fit on the GPU at
#: once for none to wait long: 64 is far below 132 SMs x 4 resident programs).
_COOP_MAX_CHUNKS = 64
#: Polls of a row's arrival count before a program reads the row itself (see the kernel).
_COOP_SPIN = 1 << 16
#: Elements of one tile of the strided kernel.
_STRIDED_TILE = 8192
_NEG_BIG = tl.constexpr(-3.4028234663852886e38)  # -FLT_MAX


def softmax_reference(x: torch.Tensor, dim: int, out_dtype: torch.dtype | None = None,
                      log: bool = False) -> torch.Tensor:
    """``torch.softmax`` (``log_softmax`` when ``log``) of ``x`` along ``dim``, computed in
    float32 and returned in ``out_dtype`` (default ``x.dtype``), ``x`` first cast to
    ``out_dtype`` as torch's ``dtype`` argument does."""
    dt = x.dtype if out_dtype is None else out_dtype
    xt = x if dt == x.dtype else x.to(dt)
    fn = torch.log_softmax if log else torch.softmax
    return fn(xt, dim, dtype=torch.float32).to(dt)


# -- kernels ---------------------------------------------------------------------------------

@triton.jit
def _rows_kernel(x_ptr, out_ptr, n_rows, N, sxr, sxn, sor, son,
                 ROWS: tl.constexpr, BLOCK_N: tl.constexpr, LOG: tl.constexpr,
                 USE_INT64: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < n_rows)[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + rows[:, None] * sxr + cols[None, :] * sxn, mask=mask,
                other=-float("inf"))
    # torch casts the input to the output dtype first (a no-op when they agree).
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    m = tl.max(x, axis=1)
    z = x - m[:, None]
    e = tl.exp(z)
    s = tl.sum(e, axis=1)
    if LOG:
        y = z - tl.log(s)[:, None]
    else:
        y = e * (1.0 / s)[:, None]
    tl.store(out_ptr + rows[:, None] * sor + cols[None, :] * son,
             y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _looped_kernel(x_ptr, out_ptr, n_rows, N, sxr, sxn, sor, son,
                   BLOCK_R: tl.constexpr, VEC: tl.constexpr, LOG: tl.constexpr,
                   USE_INT64: tl.constexpr):
    BLOCK: tl.constexpr = BLOCK_R * VEC
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    # [BLOCK_R, VEC]: each group of VEC contiguous elements is one thread's vector.
    offs = tl.arange(0, BLOCK_R)[:, None] * VEC + tl.arange(0, VEC)[None, :]
    if USE_INT64:
        offs = offs.to(tl.int64)
    n_chunks = tl.cdiv(N, BLOCK)
    for row in range(pid, n_rows, nprog):
        r = row
        if USE_INT64:
            r = tl.cast(row, tl.int64)
        x_row = x_ptr + r * sxr
        o_row = out_ptr + r * sor
        # Pass 1: running max and sum per group, the next chunk loaded ahead.
        m = tl.full([BLOCK_R], _NEG_BIG, tl.float32)
        s = tl.zeros([BLOCK_R], tl.float32)
        nxt = tl.load(x_row + offs * sxn, mask=offs < N, other=-float("inf"),
                      eviction_policy="evict_last")
        for c in range(0, n_chunks):
            cur = nxt
            ncols = (c + 1) * BLOCK + offs
            nxt = tl.load(x_row + ncols * sxn, mask=ncols < N, other=-float("inf"),
                          eviction_policy="evict_last")
            x = cur.to(out_ptr.dtype.element_ty).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
            m = m_new
        row_max = tl.max(m, axis=0)
        row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
        shift = row_max + tl.log(row_sum)
        inv = 1.0 / row_sum
        # Pass 2: the last chunk first (the most recently read, still in L2).
        last = (n_chunks - 1) * BLOCK + offs
        nxt = tl.load(x_row + last * sxn, mask=last < N, other=0.0,
                      eviction_policy="evict_first")
        for k in range(0, n_chunks):
            c = n_chunks - 1 - k
            cur = nxt
            cols = c * BLOCK + offs
            pcols = cols - BLOCK
            nxt = tl.load(x_row + pcols * sxn, mask=(pcols >= 0) & (pcols < N), other=0.0,
                          eviction_policy="evict_first")
            x = cur.to(out_ptr.dtype.element_ty).to(tl.float32)
            if LOG:
                y = x - shift
            else:
                y = tl.exp(x - row_max) * inv
            tl.store(o_row + cols * son, y.to(out_ptr.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")


@triton.jit
def _coop_kernel(x_ptr, out_ptr, ws_ptr, cnt_ptr, n_rows, N, G, spin, sxr, sxn, sor, son,
                 BLOCK: tl.constexpr, FB: tl.constexpr, G_POW2: tl.constexpr,
                 LOG: tl.constexpr, USE_INT64: tl.constexpr):
    # One program per BLOCK-element chunk of a row, the G chunks of a row cooperating: each
    # holds its chunk in registers, publishes the chunk's (max, sum), waits until the row's
    # G partials are in and writes its chunk from registers. One read and one write of HBM.
    #
    # Rows and chunks are handed out in arrival order (a ticket from an atomic counter),
    # not by program id: every program with a smaller ticket has started, so only the row
    # of the newest ticket can be waiting on programs not yet resident, and those start as
    # soon as any finished program frees a slot (no deadlock while G programs fit on the
    # GPU). A program that still waits after `spin` polls reads the whole row itself for
    # the statistics (a slow but correct fallback; the interpreter, which runs programs
    # one after another, takes it with `spin == 0` for all but a row's last chunk).
    ticket = tl.atomic_add(cnt_ptr, 1)
    row = ticket // G
    c = ticket - row * G
    offs = tl.arange(0, BLOCK)
    k = tl.arange(0, G_POW2)
    if USE_INT64:
        row = tl.cast(row, tl.int64)
        c = tl.cast(c, tl.int64)
        offs = offs.to(tl.int64)
    x_row = x_ptr + row * sxr
    cols = c * BLOCK + offs
    cmask = cols < N
    x = tl.load(x_row + cols * sxn, mask=cmask, other=-float("inf"),
                eviction_policy="evict_first")
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    # -FLT_MAX, not -inf, for a chunk of -inf only: its sum is then 0, not NaN.
    m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(ws_ptr + ticket, m)
    tl.store(ws_ptr + n_rows * G + ticket, s)
    # Release: the partials above are visible to whoever sees the incremented count.
    done = tl.atomic_add(cnt_ptr + 1 + row, 1, sem="acq_rel") + 1
    polls = 0
    while (done < G) & (polls < spin):
        done = tl.atomic_add(cnt_ptr + 1 + row, 0, sem="acquire")
        polls += 1
    if done >= G:
        # volatile: bypass L1, which may hold an older copy of the workspace line.
        pm = tl.load(ws_ptr + row * G + k, mask=k < G, other=_NEG_BIG, volatile=True)
        ps = tl.load(ws_ptr + n_rows * G + row * G + k, mask=k < G, other=0.0,
                     volatile=True)
        row_max = tl.max(pm, axis=0)
        row_sum = tl.sum(ps * tl.exp(pm - row_max), axis=0)
    else:
        # Small steps of FB elements with a scalar running (max, sum), so that the fallback
        # holds few registers beside the chunk (the kernel's count is the larger path's).
        fo = tl.arange(0, FB)
        if USE_INT64:
            fo = fo.to(tl.int64)
        row_max = _NEG_BIG
        row_sum = 0.0
        for j in range(0, tl.cdiv(N, FB)):
            jc = j * FB + fo
            xj = tl.load(x_row + jc * sxn, mask=jc < N, other=-float("inf"))
            xj = xj.to(out_ptr.dtype.element_ty).to(tl.float32)
            m_new = tl.maximum(row_max, tl.max(xj, axis=0))
            row_sum = row_sum * tl.exp(row_max - m_new) + tl.sum(tl.exp(xj - m_new), axis=0)
            row_max = m_new
    if LOG:
        y = x - (row_max + tl.log(row_sum))
    else:
        y = tl.exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * sor + cols * son, y.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _split_partials_kernel(x_ptr, out_ptr, ws_ptr, n_rows, N, C, sxr, sxn,
                           CHUNK: tl.constexpr, USE_INT64: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // C
    c = pid % C
    cols = c * CHUNK + tl.arange(0, CHUNK)
    if USE_INT64:
        row = row.to(tl.int64)
        cols = cols.to(tl.int64)
    x = tl.load(x_ptr + row * sxr + cols * sxn, mask=cols < N, other=-float("inf"))
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    # -FLT_MAX, not -inf, for a chunk of -inf only: its sum is then 0, not NaN.
    m = tl.maximum(tl.max(x, axis=0), _NEG_BIG)
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(ws_ptr + pid, m)
    tl.store(ws_ptr + n_rows * C + pid, s)


@triton.jit
def _split_finish_kernel(x_ptr, out_ptr, ws_ptr, n_rows, N, C, sxr, sxn, sor, son,
                         CHUNK: tl.constexpr, C_POW2: tl.constexpr, LOG: tl.constexpr,
                         USE_INT64: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // C
    c = pid % C
    k = tl.arange(0, C_POW2)
    pm = tl.load(ws_ptr + row * C + k, mask=k < C, other=_NEG_BIG)
    ps = tl.load(ws_ptr + n_rows * C + row * C + k, mask=k < C, other=0.0)
    row_max = tl.max(pm, axis=0)
    row_sum = tl.sum(ps * tl.exp(pm - row_max), axis=0)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    if USE_INT64:
        row = row.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = cols < N
    x = tl.load(x_ptr + row * sxr + cols * sxn, mask=mask, other=0.0)
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    if LOG:
        y = x - (row_max + tl.log(row_sum))
    else:
        y = tl.exp(x - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * sor + cols * son, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _strided_kernel(x_ptr, out_ptr, n_outer, N, inner, n_iblk, sxo, sxn, sxi, soo, son, soi,
                    BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, LOOPED: tl.constexpr,
                    LOG: tl.constexpr, USE_INT64: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rn = tl.arange(0, BLOCK_N)
    ri = tl.arange(0, BLOCK_I)
    if USE_INT64:
        rn = rn.to(tl.int64)
        ri = ri.to(tl.int64)
    for t in range(pid, n_outer * n_iblk, nprog):
        o = t // n_iblk
        ib = t % n_iblk
        if USE_INT64:
            o = tl.cast(o, tl.int64)
            ib = tl.cast(ib, tl.int64)
        icols = ib * BLOCK_I + ri
        imask = (icols < inner)[None, :]
        xb = x_ptr + o * sxo + icols[None, :] * sxi
        ob = out_ptr + o * soo + icols[None, :] * soi
        if not LOOPED:
            mask = (rn < N)[:, None] & imask
            x = tl.load(xb + rn[:, None] * sxn, mask=mask, other=-float("inf"))
            x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
            m = tl.max(x, axis=0)
            z = x - m[None, :]
            e = tl.exp(z)
            s = tl.sum(e, axis=0)
            if LOG:
                y = z - tl.log(s)[None, :]
            else:
                y = e * (1.0 / s)[None, :]
            tl.store(ob + rn[:, None] * son, y.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            n_chunks = tl.cdiv(N, BLOCK_N)
            m = tl.full([BLOCK_I], _NEG_BIG, tl.float32)
            s = tl.zeros([BLOCK_I], tl.float32)
            for c in range(0, n_chunks):
                rows = c * BLOCK_N + rn
                mask = (rows < N)[:, None] & imask
                x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=-float("inf"),
                            eviction_policy="evict_last")
                x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=0))
                s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[None, :]), axis=0)
                m = m_new
            shift = m + tl.log(s)
            inv = 1.0 / s
            for k in range(0, n_chunks):
                rows = (n_chunks - 1 - k) * BLOCK_N + rn
                mask = (rows < N)[:, None] & imask
                x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=0.0,
                            eviction_policy="evict_first")
                x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
                if LOG:
                    y = x - shift[None, :]
                else:
                    y = tl.exp(x - m[None, :]) * inv[None, :]
                tl.store(ob + rows[:, None] * son, y.to(out_ptr.dtype.element_ty), mask=mask,
                         eviction_policy="evict_first")


# -- planning ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxPlan:
    """One launch configuration. ``kind`` is ``rows``, ``coop``, ``looped``, ``split`` or
    ``strided``; ``block`` is the elements per program along ``N`` (the row block, the
    coop or split chunk, the loop chunk, or ``BLOCK_N``); ``rows`` the rows per program
    (``rows``); ``vec`` the group width (``looped``); ``chunks`` the chunks per row
    (``coop``, ``split``); ``block_inner``
    and ``looped`` the tile width and whether it loops over ``N`` (``strided``); ``grid``
    the number of programs."""

    kind: str
    block: int
    num_warps: int
    grid: int
    rows: int = 1
    vec: int = 1
    chunks: int = 1
    block_inner: int = 1
    looped: bool = False


def _pow2_floor(v: int) -> int:
    return 1 << (max(1, v).bit_length() - 1)


def _warps(elems: int, per_thread: int = 8) -> int:
    """Warps for a tile of `elems` elements, about `per_thread` each, 1 to 16."""
    return max(1, min(16, elems // (32 * per_thread)))


@functools.lru_cache(maxsize=4096)  # a pure function of its arguments, asked every call
def softmax_plan(outer: int, n: int, inner: int, in_bytes: int, *,
                 sm_count: int = DEFAULT_SM_COUNT, max_reg: int = MAX_REG_ELEMS) -> SoftmaxPlan:
    """The plan for a ``[outer, n, inner]`` view normalised over ``n``, of an input with
    ``in_bytes`` bytes per element, on a device with ``sm_count`` SMs. ``max_reg`` (a
    power of two) caps the elements one program holds in registers; tests lower it to
    reach the looped kernels with small tensors."""
    sm = max(1, sm_count)
    if inner == 1:
        if n <= max_reg:
            block = triton.next_power_of_2(max(n, 1))
            rows = 1
            # Short rows: several per program, while the grid keeps a few programs per SM.
            while rows * block < 1024 and rows < outer:
                rows *= 2
            while rows > 1 and triton.cdiv(outer, rows) < 4 * sm:
                rows //= 2
            return SoftmaxPlan("rows", block, _warps(rows * block), triton.cdiv(outer, rows),
                               rows=rows)
        few_rows = outer < sm or (outer < 4 * sm and outer * n * in_bytes <= _L2_BUDGET)
        if few_rows:
            # Cut rows into chunks so that the grid has about 2 programs per SM.
            chunk = _pow2_floor(n * outer // (2 * sm))
            chunk = max(min(2048, max_reg), min(chunk, max_reg))
            chunks = triton.cdiv(n, chunk)
            return SoftmaxPlan("split", chunk, _warps(chunk, 16), outer * chunks,
                               chunks=chunks)
        block = min(_COOP_BLOCK, max_reg)
        chunks = triton.cdiv(n, block)
        if chunks <= _COOP_MAX_CHUNKS:
            return SoftmaxPlan("coop", block, _warps(block, 32), outer * chunks, chunks=chunks)
        vec = max(1, 16 // in_bytes)
        block = max(vec, min(_LOOP_CHUNK_BYTES // in_bytes, max_reg))
        return SoftmaxPlan("looped", block, _warps(block, 16), min(outer, sm), vec=vec)
    # dim is not the last axis: tiles [BLOCK_N, BLOCK_I], inner across the threads, at
    # most 8192 elements (16 per thread at 16 warps) so that a few tiles share an SM.
    budget = min(max_reg, _STRIDED_TILE)
    min_bi = min(16, triton.next_power_of_2(inner))  # 16 columns: 32 bytes of bf16
    bi = min(64, triton.next_power_of_2(inner))
    bn = triton.next_power_of_2(max(n, 1))
    while bi > min_bi and (bn * bi > budget or outer * triton.cdiv(inner, bi) < 2 * sm):
        bi //= 2
    if bn * bi <= budget:
        tiles = outer * triton.cdiv(inner, bi)
        return SoftmaxPlan("strided", bn, _warps(bn * bi), tiles, block_inner=bi)
    # Looped over N: narrow strips, so that those in flight (about 2 per SM) stay in L2.
    # One program per tile: the hardware balances tiles over the SMs.
    while bi > min_bi and 2 * sm * n * bi * in_bytes > _L2_BUDGET:
        bi //= 2
    bn = max(1, min(bn, budget // bi))
    tiles = outer * triton.cdiv(inner, bi)
    return SoftmaxPlan("strided", bn, _warps(bn * bi, 16), tiles, block_inner=bi, looped=True)


@functools.lru_cache(maxsize=None)
def _device_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count_of(device: torch.device) -> int:
    if device.type == "cuda":
        return _device_sm_count(device.index if device.index is not None
                                else torch.cuda.current_device())
    return DEFAULT_SM_COUNT


def _span(t: torch.Tensor, pads: tuple[int, int, int]) -> int:
    """The largest element offset a kernel may form over a 3-D view, each axis padded by
    `pads` (blocks rounded up, chunks loaded ahead)."""
    return sum((size + pad) * abs(stride) for size, pad, stride in zip(t.shape, pads, t.stride()))


# -- launcher ----------------------------------------------------------------------------------

def softmax_triton(x: torch.Tensor, dim: int, out: torch.Tensor, log: bool = False, *,
                   sm_count: int | None = None, plan: SoftmaxPlan | None = None) -> torch.Tensor:
    """Write ``softmax(x, dim)`` (``log_softmax`` when ``log``) into ``out`` and return it.

    ``x``: fp16, bf16 or fp32, any rank and strides; ``dim`` in ``[-rank, rank)``.
    ``out``: ``x``'s shape, contiguous, fp16, bf16 or fp32; when its dtype differs from
    ``x``'s, ``x`` is first rounded to it (torch's ``dtype=`` argument). The math is fp32.
    Nothing is launched when ``out`` is empty. ``sm_count`` sizes the grids (default: the
    device's); ``plan`` overrides :func:`softmax_plan` (tests). No host synchronisation;
    the ``split`` and ``coop`` kernels allocate a small workspace (``coop``: zeroed
    counters, one fill).
    """
    if x.dtype not in _SUPPORTED or out.dtype not in _SUPPORTED:
        raise TypeError(f"softmax takes float16, bfloat16 or float32 tensors, got x {x.dtype} "
                        f"and out {out.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out must have x's shape {list(x.shape)}, got {list(out.shape)}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if out.device != x.device:
        raise ValueError(f"x and out must be on one device, got {x.device} and {out.device}")
    rank = max(x.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {x.dim()}; "
                         f"expected a value in [{-rank}, {rank})")
    if out.numel() == 0:
        return out
    shape = tuple(x.shape) or (1,)
    axis = dim % rank
    outer = 1
    for v in shape[:axis]:
        outer *= v
    n = shape[axis]
    inner = 1
    for v in shape[axis + 1:]:
        inner *= v
    # A view when the strides allow it; otherwise reshape copies (documented above).
    x3 = x.reshape(outer, n, inner)
    o3 = out.view(outer, n, inner)
    if plan is None:
        sms = sm_count if sm_count is not None else _sm_count_of(x.device)
        plan = softmax_plan(outer, n, inner, x.element_size(), sm_count=sms)
    pads = (plan.rows, 2 * plan.block, plan.block_inner)
    use_int64 = max(_span(x3, pads), _span(o3, pads)) > _INT32_LIMIT
    sxo, sxn, sxi = x3.stride()
    soo, son, soi = o3.stride()
    log = bool(log)
    if plan.kind == "rows":
        _rows_kernel[(plan.grid,)](x3, o3, outer, n, sxo, sxn, soo, son,
                                   ROWS=plan.rows, BLOCK_N=plan.block, LOG=log,
                                   USE_INT64=use_int64, num_warps=plan.num_warps)
    elif plan.kind == "looped":
        _looped_kernel[(plan.grid,)](x3, o3, outer, n, sxo, sxn, soo, son,
                                     BLOCK_R=plan.block // plan.vec, VEC=plan.vec, LOG=log,
                                     USE_INT64=use_int64, num_warps=plan.num_warps)
    elif plan.kind == "coop":
        # [ticket counter, arrivals per row] zeroed; then (max, sum) per chunk.
        cnt = torch.zeros(1 + outer, dtype=torch.int32, device=x.device)
        ws = torch.empty(2 * outer * plan.chunks, dtype=torch.float32, device=x.device)
        spin = _COOP_SPIN if x.device.type == "cuda" else 0
        _coop_kernel[(plan.grid,)](x3, o3, ws, cnt, outer, n, plan.chunks, spin, sxo, sxn,
                                   soo, son, BLOCK=plan.block, FB=min(plan.block, 1024),
                                   G_POW2=triton.next_power_of_2(plan.chunks), LOG=log,
                                   USE_INT64=use_int64, num_warps=plan.num_warps)
    elif plan.kind == "split":
        ws = torch.empty(2 * outer * plan.chunks, dtype=torch.float32, device=x.device)
        _split_partials_kernel[(plan.grid,)](x3, o3, ws, outer, n, plan.chunks, sxo, sxn,
                                             CHUNK=plan.block, USE_INT64=use_int64,
                                             num_warps=plan.num_warps)
        _split_finish_kernel[(plan.grid,)](x3, o3, ws, outer, n, plan.chunks, sxo, sxn, soo,
                                           son, CHUNK=plan.block,
                                           C_POW2=triton.next_power_of_2(plan.chunks), LOG=log,
                                           USE_INT64=use_int64, num_warps=plan.num_warps)
    elif plan.kind == "strided":
        n_iblk = triton.cdiv(inner, plan.block_inner)
        _strided_kernel[(plan.grid,)](x3, o3, outer, n, inner, n_iblk, sxo, sxn, sxi, soo,
                                      son, soi, BLOCK_N=plan.block,
                                      BLOCK_I=plan.block_inner, LOOPED=plan.looped, LOG=log,
                                      USE_INT64=use_int64, num_warps=plan.num_warps)
    else:
        raise ValueError(f"unknown softmax plan kind {plan.kind!r}")
    return out
