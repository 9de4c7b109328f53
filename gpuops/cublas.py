"""cuBLAS through its C API, for the GEMMs of a CUDA graph capture.

CuPy 14 refuses every cuBLAS call while the current stream captures: its binding's ``setStream``
raises ``NotImplementedError`` (``cupy_backends/cuda/libs/cublas.pyx``), so ``cupy.matmul`` cannot be
captured. cuBLAS itself can be captured when the handle's stream is the capturing stream and the
handle has a workspace of its own (no allocation inside the capture). :class:`CaptureBlas` owns such
a handle and workspace for one graph; :func:`capture_namespace` gives the ops an ``xp`` whose
``matmul`` goes through it, everything else being the device's namespace.

The C API object comes from the device's backend (:meth:`gpuops.backends.base.Backend.cublas_api`):
for CuPy, :class:`CtypesCublas`, ctypes over the ``libcublas`` CuPy loaded; a stand-in backend supplies
its own.
"""

from __future__ import annotations

import ctypes
import types

import numpy as np

OP_N, OP_T = 0, 1
# cudaDataType and cublasComputeType_t: float32 and float16 compute in float32 (as cupy.matmul does by
# default: no TF32, no float16 accumulation), float64 in float64
_TYPES = {np.dtype(np.float32): (0, 68), np.dtype(np.float16): (2, 68), np.dtype(np.float64): (1, 70)}
_GEMM_DEFAULT = -1


class CtypesCublas:
    """The C functions of the ``libcublas`` that CuPy loaded; arrays are passed by device pointer."""

    _dll = None

    def __init__(self, lib):
        if CtypesCublas._dll is None:
            CtypesCublas._dll = _load_libcublas(lib)
        self.dll = CtypesCublas._dll

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            from cupy_backends.cuda.libs.cublas import CUBLASError

            raise CUBLASError(status)  # CUBLAS_STATUS_ALLOC_FAILED (3) is an out-of-memory

    def create(self):
        h = ctypes.c_void_p()
        self._check(self.dll.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        return h

    def destroy(self, handle) -> None:
        self._check(self.dll.cublasDestroy_v2(handle), "cublasDestroy")

    def set_stream(self, handle, stream) -> None:
        self._check(self.dll.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)), "cublasSetStream")

    def set_workspace(self, handle, buf) -> None:
        self._check(self.dll.cublasSetWorkspace_v2(handle, ctypes.c_void_p(buf.data.ptr),
                                                   ctypes.c_size_t(buf.nbytes)), "cublasSetWorkspace")

    def gemm_strided_batched(self, handle, transa, transb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                             beta, C, ldc, stride_c, batch) -> None:
        dtype, compute = _TYPES[np.dtype(C.dtype)]
        scalar = ctypes.c_double if compute == 70 else ctypes.c_float
        al, be = scalar(alpha), scalar(beta)
        i, ll, p = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
        self._check(self.dll.cublasGemmStridedBatchedEx(
            handle, i(transa), i(transb), i(m), i(n), i(k), ctypes.byref(al),
            p(A.data.ptr), i(dtype), i(lda), ll(stride_a), p(B.data.ptr), i(dtype), i(ldb), ll(stride_b),
            ctypes.byref(be), p(C.data.ptr), i(dtype), i(ldc), ll(stride_c), i(batch), i(compute),
            i(_GEMM_DEFAULT)), "cublasGemmStridedBatchedEx")


def _load_libcublas(lib) -> ctypes.CDLL:
    """The libcublas CuPy uses: the one already mapped into this process (CuPy loads it when its cuBLAS
    binding is imported), else by its soname for the CUDA major version CuPy was built for."""
    import cupy_backends.cuda.libs.cublas  # noqa: F401  (loads libcublas)

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/libcublas.so" in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        return ctypes.CDLL(path)
    major = lib.cuda.runtime.runtimeGetVersion() // 1000
    errors = []
    for name in (f"libcublas.so.{major}", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise OSError("gpuops: cannot load libcublas for CUDA graph captures: " + "; ".join(errors))


def workspace_bytes(device) -> int:
    """cuBLAS's recommended workspace: 32 MiB on Hopper and newer, 4 MiB before."""
    major = int(device.lib.cuda.Device(device.index).compute_capability) // 10
    return (32 if major >= 9 else 4) << 20


class CaptureBlas:
    """A cuBLAS handle bound to one capturing stream, with a workspace of its own, for one CUDA graph.

    Make it before the capture begins (it allocates); its workspace must live as long as the graph,
    because the graph's GEMMs write into it on every replay.
    """

    def __init__(self, device, stream):
        self.device, self.xp = device, device.xp
        self.api = device.backend.cublas_api()
        self.workspace = self.xp.empty(workspace_bytes(device), dtype=self.xp.uint8)
        self.handle = self.api.create()
        try:
            self.api.set_stream(self.handle, stream)
            self.api.set_workspace(self.handle, self.workspace)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.handle is not None:
            self.api.destroy(self.handle)
            self.handle = self.workspace = None

    def matmul(self, a, b, /, *, out=None):
        """``xp.matmul`` by one strided-batched GEMM (floating types); integers as the namespace does
        them (CuPy's integer matmul is a kernel of its own, not cuBLAS)."""
        xp = self.xp
        dtype = np.result_type(a.dtype, b.dtype)
        if dtype not in _TYPES or a.ndim == 0 or b.ndim == 0:
            return xp.matmul(a, b) if out is None else _into(xp, out, xp.matmul(a, b))
        a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
        va, vb = a.ndim == 1, b.ndim == 1
        a2 = a[None, :] if va else a
        b2 = b[:, None] if vb else b
        M, K = a2.shape[-2:]
        K2, N = b2.shape[-2:]
        if K != K2:
            raise ValueError(f"matmul: mismatch in its core dimension ({a.shape} @ {b.shape})")
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        nb = int(np.prod(batch, dtype=np.int64))
        c = xp.empty((*batch, M, N), dtype=dtype)
        if c.size:
            if K == 0:
                c[...] = 0
            else:
                ta, A, sa = _operand(xp, a2, batch)
                tb, B, sb = _operand(xp, b2, batch)
                # row-major C = A @ B is column-major C^T = B^T A^T: cuBLAS gets B first
                self.api.gemm_strided_batched(
                    self.handle, tb, ta, N, M, K, 1.0, B, N if tb == OP_N else K, sb,
                    A, K if ta == OP_N else M, sa, 0.0, c, N, M * N, nb)
        if va:
            c = c[..., 0, :]
        if vb:
            c = c[..., 0]
        return c if out is None else _into(xp, out, c)


def _operand(xp, x, batch):
    """(op, C-contiguous array, batch stride) for a GEMM operand: a row-major matrix (or a batch of
    them, or one matrix broadcast over the batch with stride 0); a transposed row-major 2-D matrix is
    passed as such with OP_T, anything else is made contiguous first."""
    rows, cols = x.shape[-2:]
    if x.ndim == 2 or all(d == 1 for d in x.shape[:-2]):
        m = xp.reshape(x, (rows, cols)) if x.ndim != 2 else x
        if m.flags.c_contiguous:
            return OP_N, m, 0
        if m.T.flags.c_contiguous:  # a transpose of a row-major matrix: read as it is, transposed
            return OP_T, m.T, 0
        return OP_N, xp.ascontiguousarray(m), 0
    full = x if tuple(x.shape[:-2]) == tuple(batch) else xp.broadcast_to(x, (*batch, rows, cols))
    return OP_N, xp.ascontiguousarray(full), rows * cols


def _into(xp, out, value):
    out[...] = value
    return out


class _Namespace(types.ModuleType):
    """``inner`` with some attributes replaced."""

    def __init__(self, inner, **replaced):
        super().__init__(getattr(inner, "__name__", "xp"))
        self._inner = inner
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def capture_namespace(xp, blas: CaptureBlas):
    """``xp`` with ``matmul`` (and ``linalg.matmul``) through ``blas``: what ops see inside a capture."""
    linalg = getattr(xp, "linalg", None)
    extra = {} if linalg is None else {"linalg": _Namespace(linalg, matmul=blas.matmul)}
    return _Namespace(xp, matmul=blas.matmul, **extra)
