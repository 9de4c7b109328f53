"""A CPU stand-in for the part of CuPy that gpuops uses, so the CUDA path runs in CI without a GPU.

Set ``GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin`` and ``device="cuda"`` resolves to this module's
backend (:data:`BACKEND`, see :mod:`gpuops.backends`) instead of CuPy's. It is NumPy underneath, with
CuPy's rules on top, and it is meant to be at least as strict as CuPy on a GPU:

* arrays are a wrapper type (``ndarray``) that refuses implicit conversion to the host
  (``np.asarray(a)`` raises ``TypeError`` as CuPy does); ``.get()`` / ``asnumpy`` are the explicit copy.
* **host syncs** are counted per thread, each with what caused it: every device->host read (``.get()``,
  ``asnumpy``, ``item``, ``tolist``, ``bool``/``int``/``float``, device slice bounds, iteration,
  ``repr``, attempts at ``__array__``) and every operation whose result *shape* depends on device data (boolean-mask
  getitem/setitem, ``nonzero``/``argwhere``/``flatnonzero``/one-argument ``where``, ``unique*``,
  ``bincount``, ``compress``/``extract``/``delete``/``insert``, set operations, ``histogram``,
  ``repeat`` with device repeats), also when it happens inside the array API's wrappers: the
  namespace :data:`xp` is built as ``array_api_compat.cupy`` is, with the same wrappers written over the
  raw CuPy-like namespace :data:`cp` (:mod:`gpuops.testing._array_api`), so ``xp.clip`` runs its
  boolean-mask assignments on stand-in arrays.

  - :func:`sync_count` / :func:`launch_count`: this thread's totals; :func:`tally` is a ``with`` block
    whose result lists the syncs (``.syncs``, their "what") and counts the device op calls / kernel
    launches (``.launches``) made inside it. :func:`on_sync` registers a per-thread observer.
  - :func:`declared_syncs`: the executor runs an op that declares its syncs in it: counted, allowed.
  - :func:`strict`: inside it an *implicit* device read raises :class:`HostSyncError` (explicit
    ``.get()`` / ``asnumpy`` are allowed), so a test can prove a run reads the device only at its
    boundaries; it also raises on a result shape that depends on device data (boolean masks,
    ``nonzero``...), unless ``strict(shapes=False)`` or ``GPUOPS_STANDIN_STRICT_SHAPES=0``.
  - inside a stream capture every sync, explicit or not, raises :class:`StreamCaptureError`, as CuPy does.

  Explicit copies are also counted in ``transfers`` (``"h2d"`` / ``"d2h"``).
* CuPy 14's API and no more (read from CuPy 14.2's source): a name CuPy lacks is an AttributeError,
  a call is checked against CuPy's signature (no ``where=``/``initial=`` on reductions; ufuncs take
  ``out``/``dtype``/``casting``), operators, ufuncs and the methods built on them (``clip``, ``dot``,
  ``searchsorted``, ``copyto``/``full``) refuse host arrays as CuPy does, functions that CuPy writes as
  their first argument's method (``cupy.sum(a)`` is ``a.sum()``) answer a NumPy array on the host,
  a device array is never a
  Python integer (no ``__index__``: as a shape or an axis it is a TypeError), and the device holds
  CuPy's types only: NumPy's numeric types, bfloat16 and void/structured types; other ml_dtypes
  types, strings and objects are CuPy's ``ValueError``.
* memory comes from an emulated ``MemoryPool`` (CuPy's: free blocks kept per stream, best-fit reuse
  with splitting and merging of blocks rounded to 512 bytes, ``used_bytes``/``total_bytes``/
  ``free_bytes``/``n_free_blocks``/``set_limit``/``free_all_blocks(stream=)``, ``OutOfMemoryError``
  past the limit or the device's memory), selected with ``cuda.using_allocator`` like CuPy's, and
  observable by memory hooks.
* CUDA's failures can be injected (:func:`inject_fault`): a failed ``cudaMalloc``, kernel launch,
  cuBLAS, cuSOLVER or cuFFT call raises CuPy's exception for it (``CUDARuntimeError``,
  ``CUDADriverError``, ``CUBLASError``, ``CUSOLVERError``, ``CuFFTError``).
* ``RawModule``/``RawKernel`` launches run the same ``.cu`` source on the CPU emulation of the CUDA
  execution model (:mod:`gpuops.testing.emulator`).
* its backend (:class:`StandinBackend`) gives :class:`gpuops.device.Device` the stand-in's sync counts,
  buffer ownership, cuBLAS C API and the emulator's launch limits.

One module, past 500 lines: a test double, not runtime code; its rules (arrays, streams and their
pool arenas, graphs, libraries) check one another, and splitting it into a package is pending.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import os
import sys
import threading
import types
import weakref
from collections import Counter

import numpy as np


_state = threading.local()
transfers: Counter = Counter()  # "h2d" / "d2h": explicit host<->device copies


class ImplicitTransferError(TypeError):
    """A device array was converted to a host value without an explicit transfer."""


class HostSyncError(ImplicitTransferError):
    """An implicit host sync (a device read, or a result shape that depends on device data) inside
    :func:`strict`."""


class StreamCaptureError(RuntimeError):
    """A synchronising call inside a stream capture: like cudaErrorStreamCaptureUnsupported, or CuPy's
    RuntimeError refusing a copy to or from the host (:data:`CAPTURING_D2H`, :data:`CAPTURING_H2D`)."""


# Whether strict() also raises on data-dependent shapes by default. Off until every op is sync-free
# or declares its host reads: until then those syncs are counted (and refused by captures) only.
STRICT_SHAPES = os.environ.get("GPUOPS_STANDIN_STRICT_SHAPES", "1") not in ("", "0")


def _strict(shape: bool) -> bool:
    levels = getattr(_state, "strict", ())
    return bool(levels) and levels[-1] is not None and (not shape or levels[-1])


@contextlib.contextmanager
def strict(shapes: bool | None = None):
    """Inside this block every implicit device->host read raises :class:`HostSyncError`; so does every
    result shape that depends on device data when ``shapes`` is true (default: :data:`STRICT_SHAPES`)."""
    _state.strict = getattr(_state, "strict", ()) + (STRICT_SHAPES if shapes is None else shapes,)
    try:
        yield
    finally:
        _state.strict = _state.strict[:-1]


@contextlib.contextmanager
def declared_syncs():
    """Inside a strict region, the syncs of an op that declares them (``@op(..., syncs=...)``) are
    counted but do not raise; a stream capture still refuses them."""
    _state.strict = getattr(_state, "strict", ()) + (None,)
    try:
        yield
    finally:
        _state.strict = _state.strict[:-1]


class Tally:
    """What happened on this thread inside a :func:`tally` block."""

    def __init__(self):
        self.syncs: list[str] = []
        self.launches = 0


def _tallies() -> list:
    if not hasattr(_state, "tallies"):
        _state.tallies = []
    return _state.tallies


@contextlib.contextmanager
def tally():
    """Record this thread's host syncs (their "what") and device op calls inside the block."""
    t = Tally()
    _tallies().append(t)
    try:
        yield t
    finally:
        _tallies().remove(t)


def sync_count() -> int:
    """Host syncs on this thread so far."""
    return getattr(_state, "syncs", 0)


def launch_count() -> int:
    """Device op calls and kernel launches on this thread so far."""
    return getattr(_state, "launches", 0)


def on_sync(callback):
    """A ``with`` block in which ``callback(what)`` is called on each host sync of this thread."""
    return _Observer(callback)


class _Observer(Tally):
    def __init__(self, callback):
        super().__init__()
        self.callback = callback

    def __enter__(self):
        _tallies().append(self)
        return self

    def __exit__(self, *exc):
        _tallies().remove(self)


def _sync(what: str, explicit: bool = False, shape: bool = False) -> None:
    """Count a host sync; raise inside a capture (always) or a strict region (when implicit; for a
    data-dependent ``shape``, when the region says so)."""
    _state.syncs = sync_count() + 1
    for t in _tallies():
        t.syncs.append(what)
        if isinstance(t, _Observer):
            t.callback(what)
    _no_capture(what, CAPTURING_D2H)
    if not explicit and _strict(shape):
        raise HostSyncError(f"implicit host sync ({what}) during a strict region; read device data on "
                            "the host only through an explicit transfer (.get() / gpuops.device.to_host)")


# CuPy's refusals of a copy to or from the host while the current stream captures (MemoryPointer's
# copy_to_host_async / copy_from_host_async in cupy/cuda/memory.pyx): a RuntimeError raised before any
# CUDA call. The stand-in also invalidates the capture, which is stricter.
CAPTURING_D2H = "the current stream is capturing, so D2H transfers are disallowed"
CAPTURING_H2D = "the current stream is capturing, so H2D transfers are disallowed"


def _no_capture(what: str, cupy_message: str | None = None):
    if getattr(_state, "capture", None) is not None:
        _state.capture_invalid = what  # as CUDA does, the capture is invalidated: end_capture fails
        if cupy_message:
            raise StreamCaptureError(f"{cupy_message} ({what})")
        raise StreamCaptureError(f"{what} synchronises with the host, which a stream capture forbids")


def _launched() -> None:
    _state.launches = launch_count() + 1
    for t in _tallies():
        t.launches += 1


# -- CuPy 14's API --------------------------------------------------------------------------------
# What CuPy 14.2 has of NumPy's namespace, read from its source (cupy/__init__.py and the modules it
# imports; cupy/_core/core.pyx for the ndarray methods): a name absent here is an AttributeError on
# the stand-in as on CuPy, and a call is checked against CuPy's signature where NumPy accepts more
# ("name=positional,parameters;keyword,only", "*" / "**" for *args / **kwargs). NumPy's ufuncs are
# CuPy ufuncs, whose calls take out/dtype/casting only (cupy/_core/_kernel.pyx ufunc.__call__).


def _signatures(text: str) -> dict:
    table = {}
    for item in text.split():
        name, _, spec = item.partition("=")
        pos, _, kw = spec.partition(";")
        pos, kw = [p for p in pos.split(",") if p], [k for k in kw.split(",") if k]
        table[name] = (tuple(p for p in pos if p != "*"), frozenset(k for k in kw if k != "**"), "*" in pos,
                       "**" in kw)
    return table


_CUPY_NAMES = frozenset("""
AxisError ComplexWarning DataSource ElementwiseKernel Inf Infinity ModuleDeprecationWarning NAN NINF NZERO
NaN PINF PZERO RankWarning RawKernel RawModule ReductionKernel TooHardError VisibleDeprecationWarning
allclose angle append apply_along_axis apply_over_axes argmax argmin argwhere around array2string
array_equal array_equiv array_repr array_split asarray_chkfinite atleast_1d atleast_2d atleast_3d average
bartlett base_repr binary_repr bincount blackman bool bool_ broadcast broadcast_shapes byte c_ can_cast
cdouble cfloat choose column_stack common_type complex128 complex64 complex_ complexfloating compress
convolve copyto correlate cross csingle cuda cumprod cumsum cumulative_prod cumulative_sum diag diag_indices
diag_indices_from diagflat diagonal diff digitize disable_experimental_feature_warning dot double dsplit
dstack dtype e einsum euler_gamma exceptions expand_dims fft fft.config fft.fftshift fft.ifftshift
fill_diagonal finfo flatiter flatnonzero float16 float32 float64 float_ floating format_float_positional
format_float_scientific format_parser frombuffer fromfile fromfunction fromiter fuse generic genfromtxt
get_printoptions gradient half hamming hanning histogram2d histogramdd hsplit hstack iinfo imag index_exp
inexact inf infty inner int16 int32 int64 int8 int_ intc integer interp intp isclose iscomplex iscomplexobj
isdtype isfortran isneginf isposinf isreal isrealobj isscalar issubdtype iterable ix_ kaiser kron linalg
linalg.LinAlgError linalg.cond linalg.cross linalg.det linalg.eig linalg.eigh linalg.eigvals linalg.eigvalsh
linalg.inv linalg.lstsq linalg.norm linalg.qr linalg.slogdet linalg.solve linalg.tensorinv
linalg.tensorsolve loadtxt logspace long longlong mask_indices matrix_transpose may_share_memory median
meshgrid mgrid min_scalar_type mintypecode moveaxis nan nan_to_num nanargmax nanargmin nancumprod nancumsum
nanmedian ndarray ndim ndindex newaxis nonzero number ogrid outer packbits pad permute_dims pi place poly
poly1d polyadd polyfit polymul polynomial polysub polyval printoptions promote_types ptp put put_along_axis
putmask r_ random ravel ravel_multi_index real real_if_close repeat resize result_type roll rollaxis roots
round row_stack s_ save savetxt savez savez_compressed searchsorted select set_printoptions setdiff1d
setxor1d shape shares_memory short signedinteger single singlecomplex size sort_complex split squeeze
swapaxes tensordot testing tile trace transpose trapezoid tril tril_indices tril_indices_from triu
triu_indices triu_indices_from typename ubyte ufunc uint uint16 uint32 uint64 uint8 uintc uintp ulong
ulonglong unique_all unique_counts unique_inverse unique_values unsignedinteger unwrap ushort vander vdot
vectorize vsplit vstack where
""".split())
_CUPY_UFUNCS = frozenset("""
abs absolute acos acosh add arccos arccosh arcsin arcsinh arctan arctan2 arctanh asin asinh atan atan2 atanh
bitwise_and bitwise_count bitwise_invert bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift
bitwise_xor cbrt ceil conj conjugate copysign cos cosh deg2rad degrees divide divmod equal exp exp2 expm1
fabs fix float_power floor floor_divide fmax fmin fmod frexp gcd greater greater_equal heaviside hypot i0
invert isfinite isinf isnan lcm ldexp left_shift less less_equal linalg.matmul log log10 log1p log2
logaddexp logaddexp2 logical_and logical_not logical_or logical_xor matmul maximum minimum mod modf multiply
negative nextafter not_equal positive pow power rad2deg radians reciprocal remainder right_shift rint sign
signbit sin sinc sinh sqrt square subtract tan tanh true_divide trunc
""".split())
_CUPY_SIGNATURES = _signatures("""
all=a,axis,out,keepdims alltrue=a,axis,out,keepdims amax=a,axis,out,keepdims amin=a,axis,out,keepdims
any=a,axis,out,keepdims arange=start,stop,step,dtype argpartition=a,kth,axis argsort=a,axis,kind
array=obj,dtype,copy,order,subok,ndmin;blocking array_str=arr,max_line_width,precision,suppress_small
asanyarray=a,dtype,order;copy,blocking asarray=a,dtype,order;copy,blocking ascontiguousarray=a,dtype
asfarray=a,dtype asfortranarray=a,dtype asnumpy=a,stream,order,out;blocking astype=x,dtype;copy
broadcast_arrays=* broadcast_to=array,shape byte_bounds=a clear_memo= clip=a,a_min,a_max,out
concat=tup,axis,out;dtype,casting concatenate=tup,axis,out;dtype,casting copy=a,order
corrcoef=a,y,rowvar,bias,ddof;dtype count_nonzero=a,axis cov=a,y,rowvar,bias,ddof,fweights,aweights;dtype
cumproduct=a,axis,dtype,out delete=arr,indices,axis disp=*;** ediff1d=arr,to_end,to_begin
empty=shape,dtype,order empty_like=prototype,dtype,order,subok,shape extract=condition,a
eye=N,M,k,dtype,order fft.fft=a,n,axis,norm fft.fft2=a,s,axes,norm fft.fftfreq=n,d fft.fftn=a,s,axes,norm
fft.hfft=a,n,axis,norm fft.ifft=a,n,axis,norm fft.ifft2=a,s,axes,norm fft.ifftn=a,s,axes,norm
fft.ihfft=a,n,axis,norm fft.irfft=a,n,axis,norm fft.irfft2=a,s,axes,norm fft.irfftn=a,s,axes,norm
fft.rfft=a,n,axis,norm fft.rfft2=a,s,axes,norm fft.rfftfreq=n,d fft.rfftn=a,s,axes,norm
find_common_type=*;** flip=a,axis fliplr=a flipud=a fromDlpack=dltensor from_dlpack=array;device,copy
fromstring=*;** full=shape,fill_value,dtype,order full_like=a,fill_value,dtype,order,subok,shape
get_array_module=* get_array_wrap=*;** get_default_memory_pool= get_default_pinned_memory_pool=
histogram=x,bins,range,density,weights identity=n,dtype in1d=ar1,ar2,assume_unique,invert
indices=dimensions,dtype intersect1d=arr1,arr2,assume_unique,return_indices is_available=
isin=element,test_elements,assume_unique,invert issctype=rep issubclass_=arg1,arg2 issubsctype=arg1,arg2
lexsort=keys linalg.cholesky=a linalg.matrix_power=M,n linalg.matrix_rank=M,tol linalg.matrix_transpose=a
linalg.pinv=a,rcond linalg.svd=a,full_matrices,compute_uv
linspace=start,stop,num,endpoint,retstep,dtype,axis load=file,mmap_mode,allow_pickle
make_aligned_dtype=dtype;alignment,recurse max=a,axis,out,keepdims mean=a,axis,dtype,out,keepdims
memoize=for_each_device min=a,axis,out,keepdims msort=a nanmax=a,axis,out,keepdims
nanmean=a,axis,dtype,out,keepdims nanmin=a,axis,out,keepdims nanprod=a,axis,dtype,out,keepdims
nanstd=a,axis,dtype,out,ddof,keepdims nansum=a,axis,dtype,out,keepdims nanvar=a,axis,dtype,out,ddof,keepdims
obj2sctype=rep,default ones=shape,dtype,order ones_like=a,dtype,order,subok,shape partition=a,kth,axis
percentile=a,q,axis,out,overwrite_input,method,keepdims;interpolation piecewise=x,condlist,funclist
prod=a,axis,dtype,out,keepdims product=a,axis,dtype,out,keepdims
quantile=a,q,axis,out,overwrite_input,method,keepdims;interpolation require=a,dtype,requirements
reshape=a,newshape,order;copy rot90=a,k,axes round_=a,decimals,out safe_eval=*;** sctype2char=sctype
set_string_function=*;** show_config=;_full sometrue=a,axis,out,keepdims sort=a,axis,kind
stack=tup,axis,out;dtype,casting std=a,axis,dtype,out,ddof,keepdims sum=a,axis,dtype,out,keepdims
take=a,indices,axis,out take_along_axis=a,indices,axis trapz=y,x,dx,axis tri=N,M,k,dtype
trim_zeros=filt,trim union1d=arr1,arr2 unique=ar,return_index,return_inverse,return_counts,axis;equal_nan
unpackbits=a,axis,bitorder unravel_index=indices,dims,order var=a,axis,dtype,out,ddof,keepdims who=vardict
zeros=shape,dtype,order zeros_like=a,dtype,order,subok,shape
""")
_CUPY_METHODS = _signatures("""
T= all=axis,out,keepdims any=axis,out,keepdims argmax=axis,out,dtype,keepdims argmin=axis,out,dtype,keepdims
argpartition=kth,axis argsort=axis,kind astype=dtype,order,casting,subok,copy byteswap=inplace
choose=choices,out,mode clip=min,max,out compress=condition,axis,out conj= conjugate= copy=order cstruct=
cumprod=axis,dtype,out cumsum=axis,dtype,out device= diagonal=offset,axis1,axis2 dot=b,out dump=file dumps=
fill=value flags= flat= flatten=order get=stream,order,out,blocking imag=value item= itemsize= mT=
max=axis,out,keepdims mdspan=;index_type,allow_unsafe mean=axis,dtype,out,keepdims min=axis,out,keepdims
nbytes= ndim= nonzero= partition=kth,axis prod=axis,dtype,out,keepdims ptp=axis,out,keepdims
put=indices,values,mode ravel=order real=value reduced_view=dtype repeat=repeats,axis reshape=*;order,copy
round=decimals,out scatter_add=slices,value scatter_max=slices,value scatter_min=slices,value
searchsorted=v,side,sorter set=arr,stream sort=axis,kind squeeze=axis std=axis,dtype,out,ddof,keepdims
strides= sum=axis,dtype,out,keepdims swapaxes=axis1,axis2 take=indices,axis,out toDlpack= tobytes=order
tofile=fid,sep,format tolist= trace=offset,axis1,axis2,dtype,out transpose=*
var=axis,dtype,out,ddof,keepdims view=dtype,array_class
""")
_CUPY_ATTRIBUTES = {"real", "imag", "flags", "flat", "base", "data", "cstruct", "T", "mT"}
_UFUNC_KWARGS = frozenset({"out", "dtype", "casting"})
_GUFUNC_KWARGS = frozenset({"axes", "axis", "keepdims", "casting", "dtype", "signature", "order", "out"})
_UFUNC_METHODS = {  # which ufuncs have them in CuPy 14 (None: all), and their signatures
    "reduce": ({"add", "multiply"}, _signatures("reduce=array,axis,dtype,out,keepdims")["reduce"]),
    "accumulate": ({"add", "multiply"}, _signatures("accumulate=array,axis,dtype,out")["accumulate"]),
    "reduceat": ({"add"}, _signatures("reduceat=array,indices,axis,dtype,out")["reduceat"]),
    "at": ({"add", "subtract", "bitwise_and", "bitwise_or", "bitwise_xor"}, _signatures("at=a,indices,b")["at"]),
    "outer": (None, _signatures("outer=A,B;**")["outer"]),
}
# Parameters CuPy converts to C integers (Py_ssize_t): a device array there is a TypeError, never a read
_INT_ARGS = frozenset({"shape", "newshape", "axis", "axes", "axis1", "axis2", "source", "destination", "reps",
                       "N", "M", "n", "num", "ndmin", "kth", "s", "pad_width"})
# Functions whose operands go through elementwise kernels (or refuse non-CuPy arrays outright)
_KERNEL_OPERANDS = {"where": slice(0, 3), "concatenate": slice(0, 1), "concat": slice(0, 1),
                    "stack": slice(0, 1), "hstack": slice(0, 1), "vstack": slice(0, 1), "dstack": slice(0, 1),
                    "column_stack": slice(0, 1), "matmul": slice(0, 2)}
_NOT_AN_INTEGER = "'ndarray' object cannot be interpreted as an integer"
# CuPy functions that only call their first argument's method (``cupy.sum(a, ...)`` is
# ``a.sum(...)``, cupy/_math/sumprod.py...): given a NumPy array, CuPy runs NumPy's method and
# returns its host result; given a list or a Python scalar, it raises AttributeError
_METHOD_OF_FIRST = {"take": "take", "choose": "choose", "compress": "compress", "diagonal": "diagonal",
                    "all": "all", "any": "any", "squeeze": "squeeze", "ravel": "ravel", "repeat": "repeat",
                    "swapaxes": "swapaxes", "transpose": "transpose", "clip": "clip", "around": "round",
                    "round": "round", "round_": "round", "sum": "sum", "prod": "prod", "argmax": "argmax",
                    "argmin": "argmin", "nonzero": "nonzero", "argsort": "argsort", "argpartition": "argpartition",
                    "mean": "mean", "var": "var", "std": "std", "amin": "min", "min": "min", "amax": "max",
                    "max": "max", "ptp": "ptp", "trace": "trace", "dot": "dot"}


def _cupy_api(qualified: str):
    """What CuPy 14 has under ``qualified`` (``"sum"``, ``"linalg.inv"``): its API entry for
    :class:`_Wrapped`, None when it needs no checks, AttributeError when CuPy has no such name."""
    if qualified in _CUPY_UFUNCS:
        return ("gufunc" if qualified == "matmul" else "ufunc", qualified, None)
    spec = _CUPY_SIGNATURES.get(qualified)
    if spec is not None:
        return ("func", qualified, spec)
    if qualified in _CUPY_NAMES:
        return ("func", qualified, None)
    module, _, name = qualified.rpartition(".")
    raise AttributeError(f"module 'cupy{'.' + module if module else ''}' has no attribute '{name}'")


def _kernel_operands(values, name: str) -> None:
    """CuPy's kernels take device arrays, Python and NumPy scalars: a host array (even 0-d), a list or
    any other object is a ``TypeError`` (cupy/_core/_kernel.pyx ``_preprocess_args``, ``CScalar``)."""
    for x in values:
        if isinstance(x, (tuple, list)) and name in _KERNEL_OPERANDS and _KERNEL_OPERANDS[name].stop == 1:
            _kernel_operands(x, name)  # concatenate/stack: "Only cupy arrays can be concatenated"
        elif not isinstance(x, (ndarray, bool, int, float, complex, np.generic)):
            if name in _KERNEL_OPERANDS and _KERNEL_OPERANDS[name].stop == 1:
                raise TypeError("Only cupy arrays can be concatenated")
            raise TypeError(f"Unsupported type {type(x)}")


# positional parameters of NumPy's C functions whose signature older NumPy does not expose
_C_PARAMS = {"copyto": ("dst", "src", "casting", "where")}


def _param_names(f, api) -> tuple:
    spec = api[2]
    if spec is not None:
        return spec[0]
    try:
        names = _PARAMS[f]
    except (KeyError, TypeError):
        try:
            sig = inspect.signature(f)
            names = tuple(p.name for p in sig.parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        except (TypeError, ValueError):  # a C function without a signature (np.copyto before NumPy 2.3)
            names = _C_PARAMS.get(getattr(f, "__name__", ""), ())
        try:
            _PARAMS[f] = names
        except TypeError:
            pass
    return names


_PARAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _check_call(api, f, args, kwargs) -> None:
    """Refuse a call CuPy 14 refuses: keywords and positional arguments its signature lacks, a ufunc's
    NumPy-only keywords, host arrays as kernel operands, device arrays where CuPy needs a Python
    integer (shapes, axes: CuPy has no ``__index__``), callables in ``piecewise``; and count the
    read-back of ``arange``'s device bounds."""
    kind, name, spec = api
    if kind in ("ufunc", "gufunc"):
        allowed = _UFUNC_KWARGS if kind == "ufunc" else _GUFUNC_KWARGS
        wrong = {k: v for k, v in kwargs.items() if k not in allowed}
        if wrong:  # (CuPy prints the values; a device array's repr would read it back)
            raise TypeError(f"Wrong arguments { {k: _describe(v) for k, v in wrong.items()} }")
        nin, nargs = getattr(f, "nin", len(args)), getattr(f, "nargs", len(args))
        if kind == "ufunc" and not nin <= len(args) <= nargs:
            raise TypeError(f"Wrong number of arguments for 'cupy_{name}'. It must be either {nin} or {nargs} "
                            f"(with outputs), but given {len(args)}.")
        _kernel_operands(args[:nin], name)
        for o in (*args[nin:], *_leaves(kwargs.get("out"))):
            if o is not None and not isinstance(o, ndarray):
                raise TypeError(f"Unsupported type {type(o)}")
        return
    short = name.rpartition(".")[2]
    if spec is not None:
        pos, kwonly, varargs, varkw = spec
        if len(args) > len(pos) and not varargs:
            raise TypeError(f"{short}() takes at most {len(pos)} positional arguments ({len(args)} given)")
        if not varkw:
            for k in kwargs:
                if k not in pos and k not in kwonly:
                    raise TypeError(f"{short}() got an unexpected keyword argument '{k}'")
    names = _param_names(f, api)
    named = dict(zip(names, args))
    named.update(kwargs)
    if kind == "method" and short in ("reshape", "transpose") and args:
        named["shape"] = args
    for p in _INT_ARGS.intersection(named):
        if any(isinstance(v, ndarray) for v in _leaves(named[p])):
            raise TypeError(_NOT_AN_INTEGER)
    if short in _KERNEL_OPERANDS and kind == "func":
        _kernel_operands(args[_KERNEL_OPERANDS[short]], short)
    elif short == "arange" and kind == "func":
        bounds = [named.get(k) for k in ("start", "stop", "step")]
        if any(isinstance(b, ndarray) for b in bounds):
            if named.get("dtype") is None:  # cupy/_creation/ranges.py: numpy.dtype(type(val))
                raise TypeError("Cannot interpret '<class 'cupy.ndarray'>' as a data type")
            _sync("arange() with device bounds")  # int(numpy.ceil((stop - start) / step)) reads it back
    elif short == "clip":  # ndarray.clip -> the _clip ufunc (cupy/_core/_routines_math.pyx)
        bounds = [named.get(k) for k in (("a_min", "a_max") if kind == "func" else ("min", "max"))]
        _kernel_operands([b for b in bounds if b is not None], short)
    elif short == "dot":  # cupy/_core/_routines_linalg.pyx dot(_ndarray_base a, _ndarray_base b)
        b = named.get("b")
        if not isinstance(b, ndarray):
            raise TypeError(f"Argument 'b' has incorrect type (expected cupy._core.core._ndarray_base, "
                            f"got {type(b).__module__}.{type(b).__name__})")
    elif short == "searchsorted":  # cupy/_sorting/search.py _searchsorted
        a, v = (named.get("a"), named.get("v")) if kind == "func" else (ndarray, named.get("v"))
        if kind == "func" and not isinstance(a, ndarray):
            raise NotImplementedError("Only int or ndarray are supported for a")
        if not isinstance(v, (ndarray, int, float, complex)):
            raise NotImplementedError("Only python scalars or ndarrays are supported for v")
    elif short in ("isin", "in1d") and kind == "func":  # cupy/_logic/truth.py: _exists_kernel(ar1, sort(ar2))
        values = [named.get(k) for k in (("element", "test_elements") if short == "isin" else ("ar1", "ar2"))]
        if all(getattr(v, "size", 1) for v in values):  # an empty one returns before the kernel
            _kernel_operands([v for v in values if isinstance(v, np.ndarray)], short)
    elif short in ("copyto", "full") and kind == "func":  # cupy/_manipulation/basic.py copyto
        src = named.get("src" if short == "copyto" else "fill_value")
        if isinstance(src, np.ndarray) and src.size != 1:
            raise ValueError("non-scalar numpy.ndarray cannot be used for copyto")
    elif short == "piecewise" and kind == "func":
        funcs = named.get("funclist", ())
        if any(callable(fn) for fn in (funcs if isinstance(funcs, (list, tuple)) else [funcs])):
            raise NotImplementedError("Callable functions are not supported currently")


def _describe(v) -> str:
    return f"<ndarray {v.shape} {v.dtype}>" if isinstance(v, ndarray) else repr(v)


def _host_slices(key):
    """A key whose slices' device bounds are read back as CuPy does (``internal.pyx``
    ``_extract_slice_element`` falls back to ``int()``: one host sync per bound)."""
    keys = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(k, slice) and any(isinstance(b, ndarray) for b in (k.start, k.stop, k.step))
               for k in keys):
        return key
    out = tuple(slice(*(int(b) if isinstance(b, ndarray) else b for b in (k.start, k.stop, k.step)))
                if isinstance(k, slice) else k for k in keys)
    return out if isinstance(key, tuple) else out[0]


# -- arrays --------------------------------------------------------------------------------------

class ndarray:
    """A "device" array: a NumPy array that only leaves the device through ``get()``."""

    __slots__ = ("_a", "_m", "__weakref__")
    __array_ufunc__ = None  # NumPy ufuncs refuse us (as they refuse CuPy arrays); operators defer to us

    def __init__(self, a: np.ndarray, m: "_Buffer | None" = None):
        self._a, self._m = a, m or _track(a)

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: _wrap(self._a.T))
    mT = property(lambda self: _wrap(np.swapaxes(self._a, -1, -2)))
    device = property(lambda self: _Device(self._m.device))

    def get(self, stream=None, order="C", out=None) -> np.ndarray:
        """The explicit device->host copy (on ``stream``, default the current one, which it synchronises)."""
        _sync(".get()", explicit=True)
        with _Device(self._m.device):
            stream = stream or _current_stream()
            _access(stream, (self,), ())
            stream.synchronize()
        transfers["d2h"] += 1
        return np.array(self._a, copy=True)

    def set(self, arr, stream=None) -> None:
        """The explicit host->device copy, enqueued on ``stream`` (default: the current one): a NumPy
        array of this very dtype (byte order included) and shape, as CuPy's ``set`` checks."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if not (self._a.flags.c_contiguous or self._a.flags.f_contiguous):
            raise RuntimeError("Cannot set to non-contiguous array")
        _no_capture(".set()", CAPTURING_H2D)
        transfers["h2d"] += 1
        with _Device(self._m.device):
            _access(stream or _current_stream(), (), (self,))
        self._a[...] = arr

    def __array__(self, *args, **kwargs):
        _state.syncs = sync_count() + 1  # an attempt; it raises whatever the region
        for t in _tallies():
            t.syncs.append("__array__")
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_namespace__(self, api_version=None):
        return xp

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (_DLPACK_CUDA, self._m.device)

    def __getattr__(self, name):
        if name.startswith("__"):  # no __array_interface__ / __array_struct__ back doors to the host
            raise AttributeError(name)
        spec = _CUPY_METHODS.get(name)
        if spec is None and name not in _CUPY_ATTRIBUTES:  # NumPy's alone (to_device, itemset, ctypes...)
            raise AttributeError(f"'ndarray' object has no attribute '{name}'")
        obj = getattr(self._a, name)
        if spec is not None and callable(obj):
            return _Wrapped(obj, ("method", name, spec))
        return _wrap(obj)

    def __getitem__(self, key):
        key = _host_slices(key)
        if _has_mask(key):
            _sync("boolean-mask indexing", shape=True)  # CuPy counts the True entries on the host
        return _call(operator.getitem, (self, key))

    def __setitem__(self, key, value):
        key = _host_slices(key)
        if _has_mask(key):
            _sync("boolean-mask assignment", shape=True)
        _call(operator.setitem, (self, key, value))

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        _sync("iteration")
        return (_wrap(x) for x in self._a)

    def item(self):
        if self._a.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        _sync(".item()")
        return self._a.item()

    def tolist(self):
        _sync(".tolist()")
        return self._a.tolist()

    def __repr__(self):
        _sync("repr()")
        return f"standin.{np.array_repr(self._a)}"

    __str__ = __repr__


def _has_mask(key) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, ndarray) and k.dtype == np.bool_ for k in keys)


def _host_conversion(name, what):
    def method(self):
        _sync(what)  # CuPy allows these, but each one synchronises with the device
        return getattr(self._a, name)()

    method.__name__ = name
    return method


# CuPy's ndarray has no __index__ (cupy/_core/core.pyx): range(a), operator.index(a), a list indexed by
# a or a shape holding a raise TypeError; int()/float()/bool() read the value back (a host sync)
for _name, _what in [("__bool__", "bool()"), ("__int__", "int()"), ("__float__", "float()"),
                     ("__complex__", "complex()")]:
    setattr(ndarray, _name, _host_conversion(_name, _what))


_COMPARISONS = {"__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"}
_NO_UFUNC = object()


def _should_use_rop(other) -> bool:
    """cupy/_core/core.pyx ``_should_use_rop``: defer to an operand whose ``__array_ufunc__`` is None,
    or (without one) whose ``__array_priority__`` is higher."""
    y_ufunc = getattr(other, "__array_ufunc__", _NO_UFUNC)
    if y_ufunc is not _NO_UFUNC:
        return y_ufunc is None
    return getattr(other, "__array_priority__", 0) > 0


def _binary(name):
    def method(self, *args):
        _no_cublas_in_capture(name, (self, *args))
        if args:
            other = args[0]
            if not isinstance(other, ndarray) and _should_use_rop(other):
                return NotImplemented  # e.g. __array_ufunc__ = None: the other operand's reflected op
            if name in _COMPARISONS and isinstance(other, np.ndarray) and other.ndim == 0:
                other = other.item()  # CuPy's __richcmp__ compares with a 0-d host array's value
                args = (other,)
            elif name in ("__eq__", "__ne__") and (other is None or type(other).__eq__ is object.__eq__):
                return _call(np.full, (self.shape, name == "__ne__"))  # CuPy: never equal to an element
            _kernel_operands((other,), name)
        return _call(getattr(self._a, name), args)

    method.__name__ = name
    return method


for _name in ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lshift", "rshift"]:
    for _fmt in ("__{}__", "__r{}__", "__i{}__"):
        setattr(ndarray, _fmt.format(_name), _binary(_fmt.format(_name)))
for _name in ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__pos__", "__abs__",
              "__invert__", "__divmod__", "__rdivmod__"]:
    setattr(ndarray, _name, _binary(_name))
ndarray.__hash__ = None


_CUPY_TYPE_CHARS = frozenset("?bhilqBHILQefdFD")  # cupy/_core/_dtype.pyx all_type_chars


def _check_dtype(dtype: np.dtype) -> None:
    """Refuse what CuPy 14 cannot hold, with its ``ValueError`` (``cupy/_core/_dtype.pyx``
    ``check_supported_dtype``): big-endian types, strings, objects, datetimes, long doubles and the
    ml_dtypes types but bfloat16 (float8, float4, int4, int2...); structured and void types without
    references and bfloat16 are device types."""
    if dtype.char in _CUPY_TYPE_CHARS and dtype.type.__module__ == "numpy":
        if dtype.byteorder == ">":
            raise ValueError(f"Unsupported dtype {dtype} with big-endian byte-order")
        return
    if dtype.byteorder == ">":
        raise ValueError(f"Unsupported dtype {dtype} with big-endian byte-order")
    if dtype.type is np.void and dtype.subdtype is None and dtype.itemsize:
        if dtype.hasobject:
            raise ValueError(f"Unsupported dtype {dtype} because it contains references which cannot be "
                             "supported by CuPy.")
        return
    if dtype.name == "bfloat16" and dtype.type.__module__ == "ml_dtypes":
        return  # CuPy 14 on NumPy >= 2.1.2 with ml_dtypes: cupy/_core/_scalar.pyx registers it
    raise ValueError(f"Unsupported dtype {dtype}")


def _wrap(x):
    if isinstance(x, np.ndarray):
        _check_dtype(x.dtype)
        return ndarray(x)
    if isinstance(x, np.generic):  # CuPy returns 0-d device arrays, never host scalars
        return _wrap(np.asarray(x))
    if isinstance(x, tuple):
        return type(x)(*map(_wrap, x)) if hasattr(x, "_fields") else tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    if callable(x) and not isinstance(x, (type, np.dtype)):
        return _Wrapped(x)
    return x


def _unwrap(x):
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, tuple):
        return type(x)(*map(_unwrap, x)) if hasattr(x, "_fields") else tuple(_unwrap(v) for v in x)
    if isinstance(x, list):
        return [_unwrap(v) for v in x]
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


# NumPy methods that write into the array they are bound to
_MUTATORS = {"fill", "put", "itemset", "sort", "partition", "resize", "setfield", "__setitem__",
             "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
             "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}


def _call(f, args, kwargs=None):
    """Run a NumPy callable on device arrays, enqueued on the current stream (its reads checked
    against the buffers' last writers); inside a stream capture, also record it for replay."""
    kwargs = kwargs or {}
    _launched()
    ops = getattr(_state, "capture", None)
    stream = _current_stream()
    reads, writes = _reads_writes(f, args, kwargs)
    dev = _current_device()
    for a in reads:
        if a._m.device != dev:  # as CuPy's kernels do without peer access
            raise ValueError(f"The device where the array resides ({a._m.device}) is different from the "
                             f"current device ({dev}). Peer access is unavailable between these devices.")
    if ops is None:  # a capture runs nothing on the device: its graph's launches are checked instead
        _access(stream, reads, ())
    if _faults:
        _library_faults(f)
    out = _same_array(_wrap(f(*_unwrap(args), **_unwrap(kwargs))), reads)
    new = _new_buffers(out, reads)
    if _faults and (writes or new) and getattr(f, "__name__", "") not in _NO_KERNEL:
        _fault("launch")  # what wrote memory ran a kernel (views and empty arrays launch none)
    _access(stream, (), writes + new, check=False)
    if ops is not None:
        ops.append((f, args, kwargs, out))
    return out


def _same_array(out, reads):
    """CuPy returns the very array it was given when the result is that array (``out=``, a no-op
    ``asarray`` / ``astype(copy=False)``), never a second object for the same memory."""
    if isinstance(out, ndarray):
        for a in reads:
            if a._a is out._a:
                return a
    return out


def _array_refs(a: ndarray) -> int:
    return sys.getrefcount(a._a)


def _held_once() -> int:
    probe = ndarray.__new__(ndarray)  # untracked: no pool charge at import
    probe._a = np.empty(0)
    return _array_refs(probe)


_ARRAY_HELD_ONCE = _held_once()


def owns_buffer(a: ndarray) -> bool:
    """No other array can see ``a``'s memory. On CuPy, a view holds its base array, so the caller's
    reference count of ``a`` plus :func:`gpuops.backends.base.sole_view` tell; the stand-in's views hold
    the NumPy array inside instead, so that one must be held by ``a`` alone, and be a sole view."""
    from ..backends.base import sole_view

    return _array_refs(a) == _ARRAY_HELD_ONCE and a._a.flags.writeable and sole_view(a._a)


def _new_buffers(out, reads) -> list:
    """The arrays of ``out`` in buffers the call made (not views of what it read)."""
    old = {id(a._m) for a in reads}
    return [o for o in _leaves(out) if isinstance(o, ndarray) and id(o._m) not in old]


def _reads_writes(f, args, kwargs):
    reads = [a for a in _leaves((args, kwargs)) if isinstance(a, ndarray)]
    writes = [a for a in _leaves(kwargs.get("out")) if isinstance(a, ndarray)]
    if f is operator.setitem or getattr(f, "__name__", "") == "copyto":
        writes.append(args[0])
    owner = getattr(f, "__self__", None)
    if isinstance(owner, np.ndarray):
        m = _meta.get(id(_base(owner)))
        if m is not None:
            view = ndarray(owner, m)
            reads.append(view)
            if getattr(f, "__name__", "") in _MUTATORS:
                writes.append(view)
    return reads, writes


def _is_device(x) -> bool:
    return isinstance(x, ndarray)


# NumPy functions whose result shape depends on device data: CuPy reads a count back to size the result.
_DATA_SHAPED = {
    "nonzero", "argwhere", "flatnonzero", "unique", "unique_all", "unique_counts", "unique_inverse",
    "unique_values", "compress", "extract", "place", "delete", "insert", "setdiff1d", "intersect1d",
    "union1d", "setxor1d", "trim_zeros", "histogram", "histogram2d", "histogramdd", "histogram_bin_edges",
}
# NumPy functions that return a Python scalar where CuPy returns a 0-d device array.
_DEVICE_SCALAR = {"count_nonzero", "allclose", "array_equal", "array_equiv"}


def _data_shaped(name: str, f, args, kwargs) -> str | None:
    """What makes this call a host sync on CuPy, or None."""
    if name in _DATA_SHAPED:
        return f"{name}()"
    if name == "bincount" and args and _is_device(args[0]) and args[0].size:
        return "bincount()"  # CuPy reads max(x) + 1 back even with minlength
    if name == "where" and len(args) == 1 and not kwargs:
        return "where(condition)"
    if name == "repeat":  # np.repeat(a, repeats) or a.repeat(repeats)
        reps = kwargs.get("repeats", args[0] if isinstance(f, types.BuiltinMethodType) and
                          isinstance(getattr(f, "__self__", None), np.ndarray) else
                          (args[1] if len(args) > 1 else None))
        if _is_device(reps):
            return "repeat() with device repeats"
    return None


# What CuPy computes with cuBLAS or cuSOLVER for floating types. Their bindings refuse a capturing
# stream before any CUDA call: "calling cuBLAS API during stream capture is currently unsupported"
# (cupy_backends/cuda/libs/cublas.pyx setStream; cusolver.pyx likewise). Integer matmul is a kernel.
_CUBLAS = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum", "kron", "__matmul__", "__rmatmul__",
           "__imatmul__", "inv", "pinv", "solve", "lstsq", "det", "slogdet", "cholesky", "qr", "svd", "eig",
           "eigh", "eigvals", "eigvalsh", "matrix_power", "matrix_rank", "multi_dot", "tensorinv",
           "tensorsolve"}


def _no_cublas_in_capture(name: str, args) -> None:
    if name in _CUBLAS and getattr(_state, "capture", None) is not None and any(
            isinstance(a, ndarray) and a.dtype.kind in "fc" and a.size for a in _leaves(args)):
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")


# Sorts go through Thrust, whose dispatch knows NumPy's own types only (cupy/cuda/common.pyx
# _get_dtype_id; cupy/cuda/thrust.pyx refuses the rest): no bfloat16, no structured types.
_THRUST_SORTS = {"sort", "argsort", "lexsort"}
_THRUST_CHARS = frozenset("?bBhHiIlLqQefdFD")


def _check_sortable(name: str, f, args) -> None:
    owner = getattr(f, "__self__", None)
    keys = [owner] if isinstance(owner, np.ndarray) else list(_leaves(args[:1]))
    for k in keys:
        dtype = getattr(k, "dtype", None)
        if dtype is not None and dtype.char not in _THRUST_CHARS:
            if name == "lexsort":
                raise TypeError(f"Sorting keys with dtype '{dtype}' is not supported")
            raise NotImplementedError(f"Sorting arrays with dtype '{dtype}' is not supported")


class _Wrapped:
    """A NumPy callable (function, ufunc, bound method) taking and returning device arrays; ``api``
    says what CuPy 14 has in its place (``("func" | "ufunc" | "method", name, signature)``), whose
    arguments it checks as CuPy does (:func:`_check_call`)."""

    __slots__ = ("_f", "_name", "_api")

    def __init__(self, f, api=None):
        self._f = f
        self._name = getattr(f, "__name__", "")
        self._api = api

    def __call__(self, *args, **kwargs):
        if self._api is not None and self._api[0] == "func" and self._api[1] in _METHOD_OF_FIRST:
            first = args[0] if args else kwargs.get("a")
            if not isinstance(first, ndarray):
                return _method_of_host_value(first, _METHOD_OF_FIRST[self._api[1]], args[1:],
                                             {k: v for k, v in kwargs.items() if k != "a"})
        if self._api is not None:
            _check_call(self._api, self._f, args, kwargs)
        _no_cublas_in_capture(self._name, args)
        if self._name in _THRUST_SORTS:
            _check_sortable(self._name, self._f, args)
        what = _data_shaped(self._name, self._f, args, kwargs)
        if what is not None and any(map(_is_device, _leaves((args, kwargs)))):
            _sync(what, shape=True)
        out = _call(self._f, args, kwargs)
        if self._name in _DEVICE_SCALAR and isinstance(out, (bool, int, float, complex)):
            out = _wrap(np.asarray(out))
        return out

    def __getattr__(self, name):  # ufunc.reduce / ufunc.at / ...
        obj = getattr(self._f, name)
        if self._api is not None and self._api[0] == "ufunc" and name in _UFUNC_METHODS:
            ufunc = self._api[1].rpartition(".")[2]
            supported, spec = _UFUNC_METHODS[name]
            if supported is not None and ufunc not in supported:  # cupy/_core/_kernel.pyx ufunc.reduce...
                def unsupported(*args, **kwargs):
                    raise NotImplementedError(f"`cupy_{ufunc}.{name}` is not supported yet")
                return unsupported
            return _Wrapped(obj, ("method", f"{ufunc}.{name}", spec))
        return _wrap(obj)


def _method_of_host_value(value, method: str, args, kwargs):
    """``cupy.<f>(value, ...)`` for a ``value`` that is no device array: ``value.<method>(...)``, as
    CuPy calls it (a NumPy array answers on the host; a list or a Python number has no such method)."""
    if method == "clip":  # cupy.clip(a, a_min, a_max, out) calls a.clip(a_min, a_max, out=out)
        kwargs = dict(kwargs)
        args = (*args, *(kwargs.pop(k) for k in ("a_min", "a_max") if k in kwargs))
    return getattr(value, method)(*args, **kwargs)


def _leaves(x):
    if isinstance(x, ndarray):
        yield x
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    else:
        yield x


# -- memory --------------------------------------------------------------------------------------

class OutOfMemoryError(MemoryError):
    """``cupy.cuda.memory.OutOfMemoryError``: a pool could not get ``size`` bytes (its limit, or the
    device, was exhausted); ``total`` is what the pool had allocated from the device (its cached free
    blocks included), ``limit`` its limit (0: none). Same message and attributes as CuPy's."""

    def __init__(self, size, total, limit=0):
        self._size, self._total, self._limit = size, total, limit
        if limit == 0:
            msg = f"Out of memory allocating {size:,} bytes"
            if total != -1:
                msg += f" (allocated so far: {total:,} bytes)."
        else:
            msg = (f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                   f"limit set to: {limit:,} bytes).")
        super().__init__(msg)

    def __reduce__(self):
        return type(self), (self._size, self._total, self._limit)


class MemoryHook:
    """Base class of memory hooks (``cupy.cuda.memory_hook.MemoryHook``): the pool calls them around
    every device allocation (``alloc_*``), every pool ``malloc`` and every return to the pool."""

    name = "MemoryHook"

    def alloc_preprocess(self, device_id, mem_size):
        pass

    def alloc_postprocess(self, device_id, mem_size, mem_ptr):  # a new block from the "device"
        pass

    def malloc_preprocess(self, device_id, size, mem_size):
        pass

    def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):  # any pool malloc
        pass

    def free_preprocess(self, device_id, mem_size, mem_ptr, pmem_id):
        pass

    def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
        pass

    def __enter__(self):
        hooks = _hooks()
        if self.name in hooks:  # CuPy keys a thread's memory hooks by name
            raise KeyError(f"Hook {self.name} already exists")
        hooks[self.name] = self
        return self

    def __exit__(self, *exc):
        del _hooks()[self.name]


def _hooks() -> dict:
    if not hasattr(_state, "hooks"):
        _state.hooks = {}
    return _state.hooks


_ROUND = 512  # cupy/cuda/memory.pyx ALLOCATION_UNIT_SIZE
DEVICE_MEMORY = 16 << 30  # what each stand-in "GPU" reports as its total memory
DEVICE_COUNT = 2  # stand-in GPUs (GPUOPS_STANDIN_DEVICES overrides)
_device_bytes: Counter = Counter()  # device -> bytes every pool holds from it (cudaMalloc'd, not freed)
_addresses = iter(range(0x7F0000000000, 1 << 62, 1 << 32))  # fake device addresses of new blocks


def _round_size(size: int) -> int:
    return -(-size // _ROUND) * _ROUND


class _Chunk:
    """A piece of one device allocation (``cupy.cuda.memory._Chunk``): blocks are split on reuse
    and the pieces of one allocation are linked (``prev``/``next``) to merge again when free."""

    __slots__ = ("ptr", "size", "arena", "prev", "next", "__weakref__")

    def __init__(self, ptr: int, size: int, arena: "_Arena"):
        self.ptr, self.size, self.arena = ptr, size, arena
        self.prev = self.next = None

    def split(self, size: int) -> "_Chunk | None":
        if self.size == size:
            return None
        rest = _Chunk(self.ptr + size, self.size - size, self.arena)
        self.size = size
        rest.next, rest.prev = self.next, self
        if self.next is not None:
            self.next.prev = rest
        self.next = rest
        return rest

    def merge_next(self) -> None:
        nxt = self.next
        self.size += nxt.size
        self.next = nxt.next
        if self.next is not None:
            self.next.prev = self


class _Arena:
    """The free chunks of one stream (``cupy.cuda.memory._Arena``): a pool hands a free block only to
    an allocation on the stream it was allocated on, as CuPy's does (the memory may still be in use
    by work queued on that stream)."""

    def __init__(self):
        self.free: dict[int, _Chunk] = {}  # id(chunk) -> chunk

    def get_chunk(self, size: int) -> "_Chunk | None":
        """The smallest free chunk of at least ``size`` bytes (lowest address among equals), split."""
        fits = [c for c in self.free.values() if c.size >= size]
        if not fits:
            return None
        chunk = min(fits, key=lambda c: (c.size, c.ptr))
        del self.free[id(chunk)]
        rest = chunk.split(size)
        if rest is not None:
            self.free[id(rest)] = rest  # inserted without merging, as CuPy does
        return chunk

    def insert(self, chunk: _Chunk) -> None:
        while chunk.next is not None and id(chunk.next) in self.free:
            del self.free[id(chunk.next)]
            chunk.merge_next()
        while chunk.prev is not None and id(chunk.prev) in self.free:
            chunk = chunk.prev
            del self.free[id(chunk)]
            chunk.merge_next()
        self.free[id(chunk)] = chunk

    def free_all(self) -> int:
        """Give every non-split free chunk back to the device; the bytes freed."""
        whole = [c for c in self.free.values() if c.prev is None and c.next is None]
        for c in whole:
            del self.free[id(c)]
        return sum(c.size for c in whole)


class _DevicePool:
    """One device's part of a pool (``cupy.cuda.memory.SingleDeviceMemoryPool``): an arena of free
    blocks per stream, the bytes allocated from the device (``total``), those in use, and a limit on
    ``total``."""

    def __init__(self, device: int):
        self.device = device
        self.arenas: dict[int, _Arena] = {}  # stream identifier (its pointer) -> its free blocks
        self.total = 0
        self.in_use = 0
        self.limit = _limit_from_env(device)

    def arena(self, ident: int) -> _Arena:
        a = self.arenas.get(ident)
        if a is None:
            a = self.arenas[ident] = _Arena()
        return a

    def free_all(self, idents=None) -> None:
        freed = 0
        for ident in list(self.arenas) if idents is None else idents:
            a = self.arenas.get(ident)
            if a is not None:
                freed += a.free_all()
        self.total -= freed
        _device_bytes[self.device] -= freed

    def try_reserve(self, size: int) -> bool:
        limit = self.limit or (1 << 64) - 1
        if size > limit:
            raise OutOfMemoryError(size, self.total, limit)
        if self.total + size > limit:
            return False
        self.total += size
        return True


def _limit_from_env(device: int) -> int:
    """``CUPY_GPU_MEMORY_LIMIT`` (bytes, or a percentage of the device), as a new CuPy pool reads it."""
    limit = os.environ.get("CUPY_GPU_MEMORY_LIMIT")
    if limit is None:
        return 0
    if limit.endswith("%"):
        return int(float(limit[:-1]) / 100.0 * DEVICE_MEMORY)
    return int(limit)


def _cuda_malloc(device: int, size: int) -> int:
    """``cudaMalloc`` on a stand-in device: its memory is :data:`DEVICE_MEMORY`, shared by every pool;
    past it (or with an injected ``"malloc"`` fault) ``cudaErrorMemoryAllocation``."""
    _fault("malloc")
    if _device_bytes[device] + size > DEVICE_MEMORY:
        raise CUDARuntimeError(2)
    _device_bytes[device] += size
    return next(_addresses)


class MemoryPool:
    """``cupy.cuda.MemoryPool`` without CUDA: one pool per device inside, every method acting on the
    current device (``cuda.Device``), and in each, free blocks kept per stream (``free_all_blocks``
    takes a ``stream`` to release one stream's), as ``cupy/cuda/memory.pyx`` does."""

    def __init__(self, allocator=None):
        self._pools: dict[int, _DevicePool] = {}
        self._lock = threading.RLock()  # a GC finalizer may free a block while malloc holds it

    def _pool(self, device: int | None = None) -> _DevicePool:
        device = _current_device() if device is None else device
        p = self._pools.get(device)
        if p is None:
            p = self._pools[device] = _DevicePool(device)
        return p

    def malloc(self, size: int) -> "_Chunk | None":
        """``size`` bytes on the current device from the current stream's free blocks, else from
        the device; None for 0 bytes (CuPy hands out a null pointer without touching the pool)."""
        rounded = _round_size(size)
        dev = _current_device()
        hooks = list(_hooks().values())
        for h in hooks:
            h.malloc_preprocess(device_id=dev, size=size, mem_size=rounded)
        chunk = None
        try:
            chunk = self._malloc(rounded, dev, hooks)
        finally:
            for h in hooks:
                h.malloc_postprocess(device_id=dev, size=size, mem_size=rounded,
                                     mem_ptr=chunk.ptr if chunk is not None else 0,
                                     pmem_id=id(chunk) if chunk is not None else 0)
        return chunk

    def _malloc(self, size: int, dev: int, hooks) -> "_Chunk | None":
        if size == 0:
            return None
        ident = _stream_ident(_current_stream())
        with self._lock:
            p = self._pool(dev)
            arena = p.arena(ident)
            chunk = arena.get_chunk(size)
            if chunk is None:
                chunk = _Chunk(self._try_malloc(p, size, hooks), size, arena)
            p.in_use += chunk.size
        return chunk

    def _try_malloc(self, p: _DevicePool, size: int, hooks) -> int:
        """A new block: within the limit (after giving back every stream's whole free blocks, then
        after a garbage collection), then from the device (retried the same way), as CuPy's
        ``SingleDeviceMemoryPool._try_malloc``."""
        import gc

        ok = p.try_reserve(size)
        if not ok:
            p.free_all()
            ok = p.try_reserve(size)
        if not ok:
            gc.collect()
            p.free_all()
            ok = p.try_reserve(size)
        if not ok:
            raise OutOfMemoryError(size, p.total, p.limit)
        for attempt in range(3):
            ptr = 0
            for h in hooks:
                h.alloc_preprocess(device_id=p.device, mem_size=size)
            try:
                ptr = _cuda_malloc(p.device, size)
                return ptr
            except CUDARuntimeError as e:
                if e.status != 2:
                    p.total -= size
                    raise
                if attempt == 2:
                    break
                if attempt == 1:
                    gc.collect()
                p.free_all()
            finally:
                for h in hooks:
                    h.alloc_postprocess(device_id=p.device, mem_size=size, mem_ptr=ptr)
        p.total -= size
        raise OutOfMemoryError(size, p.total, p.limit)

    def free(self, chunk: "_Chunk", device: int = 0) -> None:
        """Return a block to the free list of the stream it was allocated on."""
        hooks = list(_hooks().values())
        for h in hooks:
            h.free_preprocess(device_id=device, mem_size=chunk.size, mem_ptr=chunk.ptr, pmem_id=id(chunk))
        with self._lock:
            p = self._pool(device)
            p.in_use -= chunk.size
            chunk.arena.insert(chunk)
        for h in hooks:
            h.free_postprocess(device_id=device, mem_size=chunk.size, mem_ptr=chunk.ptr, pmem_id=id(chunk))

    def used_bytes(self) -> int:
        return self._pool().in_use

    def total_bytes(self) -> int:
        return self._pool().total

    def free_bytes(self) -> int:
        p = self._pool()
        return p.total - p.in_use

    def n_free_blocks(self) -> int:
        return sum(len(a.free) for a in self._pool().arenas.values())

    def free_all_blocks(self, stream=None) -> None:
        """Give the current device's whole (never split) free blocks back to it: every stream's, or
        only ``stream``'s."""
        dev = _current_device()
        ident = None if stream is None else _stream_ident(stream)
        with self._lock:
            p = self._pool(dev)
            if ident is not None and ident not in p.arenas:
                return
            p.free_all(None if ident is None else (ident,))
        for g in list(_GraphRecord.live):  # blocks a captured graph still writes into go back to CUDA
            if any(pool is self and d == dev and (ident is None or i == ident) for pool, d, i in g.temps):
                g.freed = True

    def set_limit(self, size=None, fraction=None) -> None:
        """The current device's limit on the bytes this pool allocates (0: none), as CuPy checks it."""
        if size is None:
            if fraction is None:
                size = 0
            else:
                if not 0 <= fraction <= 1:
                    raise ValueError(f"memory limit fraction out of range: {fraction}")
                size = fraction * DEVICE_MEMORY
        elif fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if size < 0:
            raise ValueError(f"memory limit size out of range: {size}")
        self._pool().limit = int(size)

    def get_limit(self) -> int:
        return self._pool().limit


def _stream_ident(stream) -> int:
    """The key of a stream's free blocks in a pool: its pointer (0 for the legacy default stream)."""
    return stream.ptr


_default_pool = MemoryPool()


def get_default_memory_pool() -> MemoryPool:
    return _default_pool


def _current_pool() -> MemoryPool:
    return getattr(_state, "pool", None) or _default_pool


class _Buffer:
    """What the stand-in knows of one device allocation: its pool charge and its last write."""

    __slots__ = ("device", "writer", "wseq", "__weakref__")

    def __init__(self, device: int):
        self.device = device
        self.writer: "_Stream | None" = None  # the stream of the last write, and its position there
        self.wseq = 0


_meta: dict[int, _Buffer] = {}  # id(base array) -> its buffer


def _base(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _track(a: np.ndarray) -> _Buffer:
    """The buffer of ``a``'s base array; a new one is charged to the current pool (on the current
    stream) and returned to it when NumPy frees the memory."""
    base = _base(a)
    key = id(base)
    m = _meta.get(key)
    if m is not None:
        return m
    m = _Buffer(_current_device())
    if base.flags.owndata:
        pool = _current_pool()
        chunk = pool.malloc(base.nbytes)  # may raise OutOfMemoryError: then nothing is recorded
        if chunk is not None:
            weakref.finalize(base, _release, key, pool, chunk, m.device)
            temps = getattr(_state, "capture_temps", None)
            if temps is not None:  # the graph runs kernels on this block at every replay
                temps.add((pool, m.device, _stream_ident(_current_stream())))
        else:
            weakref.finalize(base, _meta.pop, key, None)
    else:
        weakref.finalize(base, _meta.pop, key, None)
    _meta[key] = m
    return m


def _release(key, pool, chunk, device):
    _meta.pop(key, None)
    pool.free(chunk, device)


# -- the cuda submodule ------------------------------------------------------------------------

class StreamRaceError(RuntimeError):
    """A buffer read on one stream while its last write, on another, may not have finished: no event
    wait or host synchronisation orders the two (what compute-sanitizer's racecheck would report)."""


def _current_device() -> int:
    return getattr(_state, "device", 0)


class _Device:
    """``cuda.Device(i)``: as a ``with`` block it makes ``i`` this thread's current device."""

    def __init__(self, device=None):
        self.id = _current_device() if device is None else int(getattr(device, "id", device))
        if not 0 <= self.id < _Runtime.getDeviceCount():
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id}")

    def __int__(self):
        return self.id

    def __eq__(self, other):
        return isinstance(other, _Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    @property
    def compute_capability(self) -> str:
        return "90"

    def use(self):
        _state.device = self.id

    def __enter__(self):
        self._prev = getattr(self, "_prev", [])
        self._prev.append(_current_device())
        _state.device = self.id
        return self

    def __exit__(self, *exc):
        _state.device = self._prev.pop()
        return False

    def synchronize(self):
        _no_capture("Device.synchronize()")
        for st in list(_Stream._all):
            if st.device_id == self.id:
                st._host_wait(st.seq)


class _Stream:
    """A CUDA stream: work is enqueued on it in order. The legacy default stream (``Stream.null``) of a
    device is ordered against every blocking stream of that device, and a ``non_blocking`` stream
    against nothing: only an event wait (``wait_event``) or a host synchronisation orders it."""

    _all: "weakref.WeakSet[_Stream]" = weakref.WeakSet()

    def __init__(self, null=False, non_blocking=False, ptr=None, device_id=None, **kwargs):
        self.device_id = _current_device() if device_id is None else device_id
        self.null, self.non_blocking = null, non_blocking and not null
        self.seq = 0  # how many operations were enqueued
        self.after: dict = {}  # stream -> the position in it that work enqueued now waits for
        self.waits: list = []  # (own position, stream, its position): each event wait, where it was enqueued
        self.done = 0  # the position the host has waited for
        self.ptr = 0 if null else id(self)
        _Stream._all.add(self)

    def __repr__(self):
        kind = "legacy default" if self.null else "non-blocking" if self.non_blocking else "blocking"
        return f"<{kind} stream {self.ptr:#x} of device {self.device_id}>"

    def __enter__(self):
        _streams().setdefault(self.device_id, []).append(self)
        return self

    def __exit__(self, *exc):
        _streams()[self.device_id].pop()
        return False

    def use(self):
        stack = _streams().setdefault(self.device_id, [])
        stack[-1:] = [self]
        return self

    def _enqueue(self) -> int:
        self.seq += 1
        return self.seq

    def _host_wait(self, seq: int) -> None:
        """The host waits until this stream's operation ``seq`` has run: so has what the stream had
        waited for (event waits enqueued at or before ``seq``), and what those streams had waited for
        in turn. Streams may wait on each other both ways; each step moves a stream's ``done`` forward,
        so the walk ends."""
        todo = [(self, seq)]
        while todo:
            st, pos = todo.pop()
            if st.done >= pos:
                continue
            st.done = pos
            todo.extend((other, at) for own, other, at in st.waits if own <= pos)

    def synchronize(self):
        _no_capture("Stream.synchronize()")
        self._host_wait(self.seq)

    def wait_event(self, event: "_Event") -> None:
        """Work enqueued from now on runs after the event's point in its stream (and after what that
        stream had waited for when the event was recorded), as ``cudaStreamWaitEvent``."""
        if event.stream is not None:
            self.waits.append((self.seq, event.stream, event.seq))
            self.after[event.stream] = max(self.after.get(event.stream, 0), event.seq)
            for st, pos in event.after.items():
                self.after[st] = max(self.after.get(st, 0), pos)

    def record(self, event=None) -> "_Event":
        event = event or _Event()
        event.record(self)
        return event

    def orders(self, writer: "_Stream", wseq: int) -> bool:
        """True when work enqueued on this stream now runs after ``writer``'s operation ``wseq``."""
        if writer is self or writer.done >= wseq or self.after.get(writer, 0) >= wseq:
            return True
        if writer.device_id == self.device_id and (
                (writer.null and not self.non_blocking) or (self.null and not writer.non_blocking)):
            return True  # the legacy default stream's implicit synchronisation
        return False

    def begin_capture(self, mode=None):
        if self.null:
            raise StreamCaptureError("cudaErrorStreamCaptureUnsupported: the legacy default stream "
                                     "cannot be captured")
        if getattr(_state, "capture", None) is not None:
            raise StreamCaptureError("a capture is already in progress")
        _state.capture, _state.capture_temps, _state.capture_invalid = [], set(), None
        _state.capture_stream = self

    def end_capture(self) -> "_Graph":
        ops, temps, invalid = _state.capture, _state.capture_temps, _state.capture_invalid
        _state.capture = _state.capture_temps = _state.capture_invalid = None
        if invalid is not None:
            raise StreamCaptureError(f"cudaErrorStreamCaptureInvalidated: operation failed due to a previous "
                                     f"error during capture ({invalid})")
        return _Graph(ops, temps)

    def is_capturing(self) -> bool:
        return getattr(_state, "capture", None) is not None and getattr(_state, "capture_stream", None) is self


_null_streams: dict[int, _Stream] = {}


def _null_stream(device: int) -> _Stream:
    st = _null_streams.get(device)
    if st is None:
        st = _null_streams[device] = _Stream(null=True, device_id=device)
    return st


def _streams() -> dict:
    if not hasattr(_state, "streams"):
        _state.streams = {}
    return _state.streams


def _current_stream() -> _Stream:
    dev = _current_device()
    stack = _streams().get(dev)
    return stack[-1] if stack else _null_stream(dev)


def _access(stream: _Stream, reads, writes, check=True) -> None:
    """Enqueue one operation on ``stream`` reading ``reads`` and writing ``writes`` (device arrays);
    a read (or overwrite) of a buffer whose last write on another stream is unordered raises."""
    seq = stream._enqueue()
    if check:
        for a in (*reads, *writes):
            m = a._m
            if m.writer is not None and not stream.orders(m.writer, m.wseq):
                raise StreamRaceError(
                    f"a buffer last written on {m.writer!r} is used on {stream!r} with no event wait or "
                    "synchronisation in between: the two may run concurrently")
    for a in writes:
        a._m.writer, a._m.wseq = stream, seq


class _Event:
    def __init__(self, *args, **kwargs):
        self.t = None
        self.stream: _Stream | None = None
        self.seq = 0
        self.after: dict = {}

    def record(self, stream=None):
        import time

        stream = stream or _current_stream()
        self.stream, self.seq, self.after = stream, stream.seq, dict(stream.after)
        self.t = time.perf_counter()

    def synchronize(self):
        _no_capture("Event.synchronize()")
        if self.stream is not None:
            self.stream._host_wait(self.seq)

    @property
    def done(self) -> bool:
        return True


def _get_elapsed_time(start: _Event, end: _Event) -> float:
    return (end.t - start.t) * 1e3


@contextlib.contextmanager
def _using_allocator(malloc=None):
    pool = getattr(malloc, "__self__", None)
    prev = getattr(_state, "pool", None)
    _state.pool = pool if isinstance(pool, MemoryPool) else None
    try:
        yield
    finally:
        _state.pool = prev


class CUDARuntimeError(RuntimeError):
    """``cupy.cuda.runtime.CUDARuntimeError`` (``cupy_backends/cuda/api/runtime.pyx``): a CUDA runtime
    call failed with ``status``; the message is ``cudaGetErrorName: cudaGetErrorString``."""

    _NAMES = {1: ("cudaErrorInvalidValue", "invalid argument"),
              2: ("cudaErrorMemoryAllocation", "out of memory"),
              101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
              700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
              900: ("cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"),
              901: ("cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture")}

    def __init__(self, status: int):
        self.status = status
        name, msg = self._NAMES.get(status, ("cudaErrorUnknown", "unknown error"))
        super().__init__(f"{name}: {msg}")

    def __reduce__(self):
        return type(self), (self.status,)


class CUDADriverError(RuntimeError):
    """``cupy.cuda.driver.CUDADriverError`` (``cupy_backends/cuda/api/driver.pyx``): a driver call
    (a kernel launch, a module load) failed with ``status``: ``cuGetErrorName: cuGetErrorString``."""

    _NAMES = {1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
              2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
              209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"),
              218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
              700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
              701: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"),
              719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure")}

    def __init__(self, status: int):
        self.status = status
        name, msg = self._NAMES.get(status, ("CUDA_ERROR_UNKNOWN", "unknown error"))
        super().__init__(f"{name}: {msg}")

    def __reduce__(self):
        return type(self), (self.status,)


class CUBLASError(RuntimeError):
    """``cupy.cuda.cublas.CUBLASError`` (``cupy_backends/cuda/libs/cublas.pyx``): a cuBLAS call failed
    with ``status``; the message is the status name."""

    _NAMES = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
              7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
              13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
              15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}

    def __init__(self, status: int):
        self.status = status
        super().__init__(self._NAMES[status])

    def __reduce__(self):
        return type(self), (self.status,)


class CUSOLVERError(RuntimeError):
    """``cupy.cuda.cusolver.CUSOLVERError`` (``cupy_backends/cuda/libs/cusolver.pyx``): ``status``
    (2 is CUSOLVER_STATUS_ALLOC_FAILED); the message is the status name."""

    _NAMES = {0: "CUSOLVER_STATUS_SUCCESS", 1: "CUSOLVER_STATUS_NOT_INITIALIZED", 2: "CUSOLVER_STATUS_ALLOC_FAILED",
              3: "CUSOLVER_STATUS_INVALID_VALUE", 4: "CUSOLVER_STATUS_ARCH_MISMATCH",
              5: "CUSOLVER_STATUS_MAPPING_ERROR", 6: "CUSOLVER_STATUS_EXECUTION_FAILED",
              7: "CUSOLVER_STATUS_INTERNAL_ERROR", 8: "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
              9: "CUSOLVER_STATUS_NOT_SUPPORTED", 10: "CUSOLVER_STATUS_ZERO_PIVOT"}

    def __init__(self, status: int):
        self.status = status
        super().__init__(self._NAMES[status])

    def __reduce__(self):
        return type(self), (self.status,)


class CuFFTError(RuntimeError):
    """``cupy.cuda.cufft.CuFFTError`` (``cupy/cuda/cufft.pyx``): a cuFFT call (a plan's creation, its
    work area's allocation, its execution) failed; the code is in ``result``, not ``status``
    (2 is CUFFT_ALLOC_FAILED), and the message is its name."""

    _NAMES = dict(enumerate(
        ["CUFFT_SUCCESS", "CUFFT_INVALID_PLAN", "CUFFT_ALLOC_FAILED", "CUFFT_INVALID_TYPE", "CUFFT_INVALID_VALUE",
         "CUFFT_INTERNAL_ERROR", "CUFFT_EXEC_FAILED", "CUFFT_SETUP_FAILED", "CUFFT_INVALID_SIZE",
         "CUFFT_UNALIGNED_DATA", "CUFFT_INCOMPLETE_PARAMETER_LIST", "CUFFT_INVALID_DEVICE", "CUFFT_PARSE_ERROR",
         "CUFFT_NO_WORKSPACE", "CUFFT_NOT_IMPLEMENTED", "CUFFT_LICENSE_ERROR", "CUFFT_NOT_SUPPORTED"]))

    def __init__(self, result: int):
        self.result = result
        super().__init__(self._NAMES[result])

    def __reduce__(self):
        return type(self), (self.result,)


# -- injected faults -----------------------------------------------------------------------------

FAULT_SITES = ("malloc", "launch", "cublas", "cusolver", "cufft")
_faults: dict = {}  # site -> [error or factory, how many more times (None: every time)]
_faults_lock = threading.Lock()


@contextlib.contextmanager
def inject_fault(site: str, error, times: int | None = None):
    """Inside the block, make the stand-in fail at ``site`` as a GPU can, raising ``error`` (an
    exception, or a callable making one) the next ``times`` times (default: every time), on any thread:

    * ``"malloc"``: the device allocation under a memory pool (``cudaMalloc``): the pool frees its
      cached blocks and retries as CuPy's does, then raises :class:`OutOfMemoryError`;
    * ``"launch"``: every kernel launch (each device op, each ``RawKernel`` call), as the driver's
      ``cuLaunchKernel`` fails (e.g. ``CUDADriverError(2)``, CUDA_ERROR_OUT_OF_MEMORY);
    * ``"cublas"`` / ``"cusolver"`` / ``"cufft"``: the calls CuPy makes through those libraries
      (``matmul``/``dot``/``tensordot``/``einsum``, ``linalg``'s factorizations, ``fft``).
    """
    if site not in FAULT_SITES:
        raise ValueError(f"unknown fault site {site!r}; one of {FAULT_SITES}")
    with _faults_lock:
        prev = _faults.get(site)
        _faults[site] = [error, times]
    try:
        yield
    finally:
        with _faults_lock:
            if prev is None:
                _faults.pop(site, None)
            else:
                _faults[site] = prev


def _fault(site: str) -> None:
    if not _faults:
        return
    with _faults_lock:
        entry = _faults.get(site)
        if entry is None or entry[1] == 0:
            return
        if entry[1] is not None:
            entry[1] -= 1
        error = entry[0]
    raise error() if callable(error) and not isinstance(error, BaseException) else error


_NO_KERNEL = {"empty", "empty_like"}  # new arrays that CuPy only allocates
_CUBLAS_CALLS = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum", "matvec", "vecmat"}
_CUSOLVER_CALLS = {"inv", "pinv", "det", "slogdet", "solve", "lstsq", "cholesky", "qr", "svd", "eigh",
                   "eigvalsh", "matrix_rank", "tensorinv", "tensorsolve"}


def _library_faults(f) -> None:
    """The injected faults of the CUDA library a NumPy callable stands for."""
    name = getattr(f, "__name__", "")
    module = getattr(f, "__module__", None) or ""
    if name in _CUBLAS_CALLS:
        _fault("cublas")
    elif module.startswith("numpy.fft"):
        _fault("cufft")
    elif module.startswith("numpy.linalg") and name in _CUSOLVER_CALLS:
        _fault("cusolver")


DEVICE_COUNT_ENV = "GPUOPS_STANDIN_DEVICES"


class _Runtime:
    CUDARuntimeError = CUDARuntimeError

    @staticmethod
    def getDeviceCount() -> int:
        return int(os.environ.get(DEVICE_COUNT_ENV, "") or DEVICE_COUNT)

    @staticmethod
    def getDevice() -> int:
        return _current_device()

    @staticmethod
    def getDeviceProperties(index: int) -> dict:
        _Device(index)
        return {"name": b"gpuops CPU stand-in", "totalGlobalMem": DEVICE_MEMORY,
                "pciBusID": 0x10 + index, "pciDeviceID": 0, "pciDomainID": 0}

    @staticmethod
    def runtimeGetVersion() -> int:
        return 0

    @staticmethod
    def deviceSynchronize() -> None:
        _Device().synchronize()

    @staticmethod
    def memGetInfo():  # of the current device: what no pool holds
        return DEVICE_MEMORY - _device_bytes[_current_device()], DEVICE_MEMORY


class _Graph:
    """A captured stream: replaying it re-runs every recorded call on the same buffers, writing each
    result into the array the capture produced, as a CUDA graph re-launches its kernels. The launch is
    enqueued on ``stream``: every buffer it reads must be ordered before it there. Like CuPy's
    ``Graph`` (a cdef class), it takes no weak reference: its state lives in a record of its own."""

    __slots__ = ("_rec",)

    def __init__(self, ops, temps=()):
        self._rec = _GraphRecord(ops, temps)

    def launch(self, stream=None):
        _no_capture("Graph.launch()")
        if self._rec.freed:
            raise CUDARuntimeError(700)
        stream = stream or _current_stream()
        for f, args, kwargs, out in self._rec.ops:
            reads, writes = _reads_writes(f, args, kwargs)
            _access(stream, reads, ())
            _copy_into(out, f(*_unwrap(args), **_unwrap(kwargs)))
            _access(stream, (), writes + _new_buffers(out, reads), check=False)


class _GraphRecord:
    """What a live :class:`_Graph` launches, and the (pool, device, stream) blocks it allocated from
    while captured. On a GPU the capture's temporaries go back to that pool's cache as soon as Python
    drops them, yet every replay writes into them: freeing the pool's cached blocks while the graph
    lives breaks it (the record keeps them alive, and ``freed`` says the graph would fault)."""

    __slots__ = ("ops", "temps", "freed", "__weakref__")
    live: "weakref.WeakSet[_GraphRecord]" = weakref.WeakSet()

    def __init__(self, ops, temps):
        self.ops, self.temps, self.freed = ops, set(temps), False
        _GraphRecord.live.add(self)


def _copy_into(out, new):
    if isinstance(out, ndarray):
        if out._a is not new:
            np.copyto(out._a, new)
    elif isinstance(out, (tuple, list)):
        for o, n in zip(out, new):
            _copy_into(o, n)


def _get_current_stream(device_id=None) -> _Stream:
    if device_id is None:
        return _current_stream()
    with _Device(device_id):
        return _current_stream()


class _StreamNamespace:
    """``cuda.Stream``: the class, with CuPy's ``Stream.null`` (this device's legacy default stream)."""

    def __call__(self, *args, **kwargs):
        return _Stream(*args, **kwargs)

    def __instancecheck__(self, obj):
        return isinstance(obj, _Stream)

    @property
    def null(self) -> _Stream:
        return _null_stream(_current_device())


cuda = types.SimpleNamespace(
    Stream=_StreamNamespace(), get_current_stream=_get_current_stream,
    alloc_pinned_memory=lambda nbytes: bytearray(nbytes),  # page-locked on a GPU; plain memory here
    Device=_Device, MemoryPool=MemoryPool, MemoryHook=MemoryHook, using_allocator=_using_allocator,
    Event=_Event, get_elapsed_time=_get_elapsed_time, runtime=_Runtime,
    cublas=types.SimpleNamespace(CUBLASError=CUBLASError),
    cusolver=types.SimpleNamespace(CUSOLVERError=CUSOLVERError),
    cufft=types.SimpleNamespace(CuFFTError=CuFFTError),
    driver=types.SimpleNamespace(CUDADriverError=CUDADriverError),
    memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
)


# -- kernels -------------------------------------------------------------------------------------

class RawModule:
    """``cupy.RawModule`` whose functions run on the CPU emulation of the CUDA execution model."""

    def __init__(self, code: str, options=(), name_expressions=(), **kwargs):
        from .emulator import RawModule as EmuModule

        self._m = EmuModule(code=code, options=tuple(options), name_expressions=tuple(name_expressions))

    def get_function(self, name: str):
        fn = self._m.get_function(name)

        def launch(grid, block, args, shared_mem=0, **kwargs):
            args = tuple(args)
            absent = [i for i, a in enumerate(args) if a is None]
            if absent:  # CuPy 13 launches None as a garbage pointer (CuPy issue 9046)
                raise TypeError(f"kernel {name}: argument {absent[0]} is None; pass a null pointer as an "
                                "8-byte integer zero (np.uint64(0))")
            _call(fn, (grid, block, args), {"shared_mem": shared_mem})

        return launch


# -- cuBLAS's C API --------------------------------------------------------------------------------

class _CublasHandle:
    def __init__(self):
        self.stream = _null_stream(_current_device())  # cublasCreate: the legacy default stream
        self.workspace = None
        self.alive = True


class _CublasC:
    """The C functions :mod:`gpuops.cublas` calls, over stand-in arrays: a GEMM runs (or is recorded) on
    the handle's stream, not the current one. Inside a capture the handle's stream must be the capturing
    stream and the handle must have a workspace (else cuBLAS would allocate inside the capture)."""

    def __init__(self, lib=None):
        pass

    def create(self) -> _CublasHandle:
        _no_capture("cublasCreate()")
        return _CublasHandle()

    def destroy(self, handle: _CublasHandle) -> None:
        handle.alive = False

    def set_stream(self, handle: _CublasHandle, stream: _Stream) -> None:
        handle.stream = stream

    def set_workspace(self, handle: _CublasHandle, buf: ndarray) -> None:
        if not isinstance(buf, ndarray) or not buf.nbytes:
            raise CUBLASError(7)  # CUBLAS_STATUS_INVALID_VALUE (device addresses, and so alignment, are CuPy's pool's)
        handle.workspace = buf

    def gemm_strided_batched(self, handle, transa, transb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                             beta, C, ldc, stride_c, batch) -> None:
        if not handle.alive:
            raise CUBLASError(1)  # CUBLAS_STATUS_NOT_INITIALIZED
        capturing = getattr(_state, "capture", None) is not None
        if capturing and handle.stream is not getattr(_state, "capture_stream", None):
            _state.capture_invalid = "a cuBLAS call on a stream other than the capturing one"
            raise StreamCaptureError("cudaErrorStreamCaptureImplicit: cuBLAS ran on a stream other than the "
                                     "capturing one")
        if capturing and handle.workspace is None:
            raise CUBLASError(13)  # CUBLAS_STATUS_EXECUTION_FAILED: no workspace may be allocated in a capture
        if not (A.dtype == B.dtype == C.dtype) or not all(x.flags.c_contiguous for x in (A, B, C)):
            raise CUBLASError(7)
        ra, ca = (m, k) if transa == 0 else (k, m)
        rb, cb = (k, n) if transb == 0 else (n, k)
        if min(lda - ra, ldb - rb, ldc - m) < 0:
            raise CUBLASError(7)  # a leading dimension shorter than its column

        def col_major(x, rows, cols, ld, stride):
            need = (batch - 1) * stride + (cols - 1) * ld + rows
            if need > x.size:  # a GPU would read or write past the buffer
                raise CUBLASError(7)
            it = x.itemsize
            return np.lib.stride_tricks.as_strided(x.reshape(-1), (batch, rows, cols), (stride * it, it, ld * it))

        def gemm(A, B, out):
            a = col_major(A, ra, ca, lda, stride_a)
            b = col_major(B, rb, cb, ldb, stride_b)
            a = a if transa == 0 else a.transpose(0, 2, 1)
            b = b if transb == 0 else b.transpose(0, 2, 1)
            acc = np.float64 if out.dtype == np.float64 else np.float32
            c = col_major(out, m, n, ldc, stride_c)
            prod = np.matmul(a.astype(acc), b.astype(acc)) * acc(alpha)
            if beta:
                prod += acc(beta) * c.astype(acc)
            c[...] = prod.astype(out.dtype)
            return out

        with handle.stream:
            _call(gemm, (A, B), {"out": C})


# -- the namespace -------------------------------------------------------------------------------

_DLPACK_CUDA = 2  # DLPack's kDLCUDA


def asarray(obj, dtype=None, copy=None, **kwargs):
    """Host data -> device array (an explicit host->device copy); arrays of the current device pass
    through, and another device's are copied to it, as CuPy does."""
    if isinstance(obj, ndarray):
        if obj._m.device != _current_device():
            with _Device(obj._m.device):
                _access(_current_stream(), (obj,), ())
            out = _wrap(np.array(obj._a, dtype=dtype, copy=True))  # a peer copy
            _access(_current_stream(), (), (out,), check=False)
            return out
        return obj if dtype is None or obj.dtype == dtype else _wrap(obj._a.astype(dtype))
    if isinstance(obj, (list, tuple)) and any(isinstance(v, ndarray) for v in obj):
        return _wrap(np.asarray(_unwrap(obj), dtype=dtype))
    _no_capture("a host->device copy from pageable memory", CAPTURING_H2D)
    transfers["h2d"] += 1
    host = np.array(obj, dtype=dtype, copy=True)
    if host.dtype.byteorder == ">":  # CuPy copies host data to little-endian (_dtype.normalize_dtype)
        host = host.astype(host.dtype.newbyteorder("<"))
    return _wrap(host)


def asnumpy(a, stream=None) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def from_dlpack(x):
    """A DLPack producer on a (stand-in) CUDA device -> a zero-copy array on that device. CPU producers
    are refused with CuPy's ``TypeError``."""
    if isinstance(x, ndarray):
        return x
    kind, dev = x.__dlpack_device__()
    if kind != _DLPACK_CUDA:
        raise TypeError("CPU arrays cannot be directly imported to CuPy. "
                        "Use `cupy.array(numpy.from_dlpack(input))` instead." if kind == 1 else
                        f"Unsupported array type: {kind}")
    host = types.SimpleNamespace(__dlpack__=x.__dlpack__, __dlpack_device__=lambda: (1, 0))
    with _Device(dev):  # stand-in device memory is host memory
        return _wrap(np.from_dlpack(host))


class _Namespace(types.ModuleType):
    """A namespace whose missing attributes come from ``inner``: NumPy's functions taking and returning
    device arrays (the raw, CuPy-like namespace), or the raw namespace's (the array API one)."""

    def __init__(self, name, inner, wrap=True, api_prefix=None):
        super().__init__(name)
        self._inner, self._wrap_inner = inner, wrap
        self._api_prefix = api_prefix  # "" for cupy, "linalg." / "fft." for its submodules: checked

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        api = None
        if self._api_prefix is not None:
            api = _cupy_api(self._api_prefix + name)  # AttributeError for what CuPy 14 lacks
        obj = getattr(self._inner, name)
        if isinstance(obj, types.ModuleType) and self._wrap_inner:
            prefix = f"{name}." if self._api_prefix == "" and name in ("linalg", "fft") else None
            obj = _Namespace(f"{self.__name__}.{name}", obj, api_prefix=prefix)
        elif self._wrap_inner:
            obj = _wrap(obj)
            if api is not None and isinstance(obj, _Wrapped):
                obj._api = api
        setattr(self, name, obj)
        return obj


cp = _Namespace(f"{__name__}.cp", np, api_prefix="")  # what ``import cupy`` gives, on stand-in arrays
for _k, _v in {"ndarray": ndarray, "asarray": asarray, "asnumpy": asnumpy, "from_dlpack": from_dlpack,
               "cuda": cuda, "RawModule": RawModule, "get_default_memory_pool": get_default_memory_pool}.items():
    setattr(cp, _k, _v)


def array(obj, dtype=None, copy=True, **kwargs):
    """``cupy.array``: a new array (a device-side copy of a device array) unless ``copy=False`` and
    none is needed."""
    if copy and isinstance(obj, ndarray) and obj._m.device == _current_device():
        return _call(np.array, (obj,), {"dtype": dtype, "copy": True})
    return asarray(obj, dtype=dtype)


cp.array = array


def _array_api_namespace():
    """The namespace ``array_api_compat.cupy`` would be on the stand-in: the raw namespace, with the
    array API's wrappers (:mod:`gpuops.testing._array_api`) written over it and CuPy's own adjustments,
    so that what those wrappers do (``clip``'s boolean-mask assignments, ``nonzero``...) happens on
    stand-in arrays."""
    from . import _array_api

    ns = _Namespace(f"{__name__}.xp", cp, wrap=False)
    main = _array_api.aliases(cp, ns, library_names=_CUPY_NAMES)
    for name, f in main.items():
        setattr(ns, name, f)
    for new, old in [("acos", "arccos"), ("acosh", "arccosh"), ("asin", "arcsin"), ("asinh", "arcsinh"),
                     ("atan", "arctan"), ("atan2", "arctan2"), ("atanh", "arctanh"),
                     ("bitwise_left_shift", "left_shift"), ("bitwise_invert", "invert"),
                     ("bitwise_right_shift", "right_shift"), ("concat", "concatenate"), ("pow", "power")]:
        setattr(ns, new, getattr(cp, old))
    ns.bool = np.bool_

    def api_asarray(obj, /, *, dtype=None, device=None, copy=None, **kwargs):
        with cuda.Device(device):  # as array-api-compat's: copy=True always copies
            if copy is None:
                return asarray(obj, dtype=dtype)
            res = array(obj, dtype=dtype, copy=copy)
            if not copy and res is not obj:
                raise ValueError("Unable to avoid copy while creating an array as requested")
            return res

    def astype(x, dtype, /, *, copy=True, device=None):
        return x.astype(dtype=dtype, copy=copy)

    def count_nonzero(x, axis=None, keepdims=False):
        r = cp.count_nonzero(x, axis)
        if keepdims:
            return cp.reshape(r, [1] * x.ndim) if axis is None else cp.expand_dims(r, axis)
        return r

    def _integral_copy(f):
        return lambda x, /: x.copy() if np.issubdtype(x.dtype, np.integer) else f(x)

    ns.asarray, ns.astype, ns.count_nonzero = api_asarray, astype, count_nonzero
    ns.ceil, ns.floor, ns.trunc = (_integral_copy(getattr(cp, n)) for n in ("ceil", "floor", "trunc"))
    ns.take_along_axis = lambda x, indices, /, *, axis=-1: cp.take_along_axis(x, indices, axis=axis)
    ns.broadcast_arrays = lambda *arrays: tuple(cp.broadcast_arrays(*arrays))
    ns.meshgrid = lambda *arrays, indexing="xy": tuple(cp.meshgrid(*arrays, indexing=indexing))
    ns.searchsorted = lambda x1, x2, /, *, side="left", sorter=None: cp.searchsorted(
        x1, x2 if isinstance(x2, ndarray) else asarray(x2), side, sorter)
    ns.isin = lambda x1, x2, /, *, invert=False, **kw: cp.isin(
        asarray(x1) if isinstance(x1, int) else x1, asarray(x2) if isinstance(x2, int) else x2, invert=invert, **kw)
    for sub, wrappers in (("linalg", _array_api.linalg_aliases(cp, main)), ("fft", _array_api.fft_aliases(cp))):
        mod = _Namespace(f"{__name__}.xp.{sub}", getattr(cp, sub), wrap=False)
        for name, f in wrappers.items():
            setattr(mod, name, f)
        setattr(ns, sub, mod)
    for k in ("ndarray", "asnumpy", "from_dlpack", "cuda", "RawModule", "get_default_memory_pool"):
        setattr(ns, k, getattr(cp, k))
    ns.array = cp.array
    return ns


xp = _array_api_namespace()


# -- the backend -----------------------------------------------------------------------------------

from ..backends import register as _register  # noqa: E402
from ..backends.base import GPU_LIMITS, LaunchLimits  # noqa: E402

GPU_LAUNCH_SHAPES_ENV = "GPUOPS_STANDIN_GPU_LAUNCH_SHAPES"
"""Set (to anything but ``0``) when the stand-in is imported, kernels launch with a GPU's shapes
(:data:`gpuops.backends.base.GPU_LIMITS`) instead of the emulator's small ones. The kernel tests run
both always (tests/kernels/conftest.py); whole models take ~10x longer with a GPU's shapes
(squeezenet 0.9 s -> 7.7 s, resnet50 3.6 s -> 42 s per run on the stand-in, 2026-11-27)."""
from ..backends.cupy import CupyBackend  # noqa: E402


class StandinBackend(CupyBackend):
    """The stand-in as a :mod:`gpuops.backends` backend: CuPy's adapter over this module, with what only
    the stand-in can tell (every host sync, kernel launches, buffer ownership through its wrapper
    arrays), its own cuBLAS C API, and the emulator's launch limits: each emulated thread costs a
    context switch, so grid-stride kernels get at most 8 blocks of at most 128 threads, NMS's select
    kernel 32 threads and a batched GEMM 4 grid layers."""

    emulated = True
    launch_limits = LaunchLimits(max_blocks=8, max_threads=128, max_grid_z=4, nms_select_block=32)
    if os.environ.get(GPU_LAUNCH_SHAPES_ENV, "") not in ("", "0"):
        launch_limits = GPU_LIMITS  # a GPU's launch shapes, ~10x slower on whole models

    def host_sync_count(self) -> int:
        return sync_count()

    def declared_syncs(self):
        return declared_syncs()

    def kernel_launch_count(self) -> int | None:
        return launch_count()

    def owns_buffer(self, value) -> bool:
        return owns_buffer(value)

    def cublas_api(self):
        return _CublasC()

    def holds_bfloat16(self) -> bool:
        return True  # as CuPy 14 on NumPy >= 2.1.2 with ml_dtypes


BACKEND = StandinBackend(sys.modules[__name__], __name__, xp)
_register(BACKEND)  # its arrays are known as soon as the module is imported


def gpuops_backend() -> StandinBackend:
    """The backend that ``GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin`` selects."""
    return BACKEND
