"""The backend protocol under Device (gpuops.backends): which backend a device and an array have, how
GPUOPS_CUDA_BACKEND selects the CUDA one, and that the runtime never imports gpuops.testing."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import gpuops
from gpuops import backends, kernels
from gpuops import device as _device
from gpuops.errors import DeviceError

STANDIN = _device.uses_standin()


def _python(code: str, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != backends.BACKEND_ENV}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_devices_hold_their_backend():
    cpu, cuda = gpuops.get_device("cpu"), gpuops.get_device("cuda")
    assert cpu.backend is backends.cpu() and cpu.lib is None and cpu.xp is cpu.backend.namespace()
    assert cuda.backend is backends.cuda() and cuda.backend.kind == "cuda" and cuda.lib is cuda.backend.lib
    assert cuda.xp is cuda.backend.namespace()


def test_an_array_is_traced_to_its_backend():
    dev = gpuops.get_device("cuda")
    x = dev.asarray(np.arange(4, dtype=np.float32))
    assert backends.owner(x) is dev.backend and dev.backend.device_id(x) == dev.index
    assert backends.owner(np.zeros(2)) is backends.cpu()
    assert backends.owner([1, 2]) is None and backends.owner(3.0) is None
    assert kernels.backend_of(x) is dev.backend and kernels.is_device_array(x)
    assert not kernels.is_device_array(np.zeros(2))
    with pytest.raises(TypeError, match="not a CUDA device array"):
        kernels.backend_of(np.zeros(2))


def test_kernel_launches_follow_the_backends_limits():
    b = gpuops.get_device("cuda").backend
    lim = b.launch_limits
    (grid,), (block,) = kernels.launch_config(10**7, b)
    assert block == min(256, lim.max_threads or 256) and grid == min(lim.max_blocks, -(-10**7 // block))
    assert kernels.launch_config(10**7, b, block=256, exact_block=True)[1] == (256,)
    assert kernels.launch_config(1, b) == ((1,), (block,))
    assert kernels.launch_config(10**7, b.lib) == kernels.launch_config(10**7, b)  # its module names it too
    if STANDIN:  # the emulator's: few blocks of few threads
        assert (lim.max_blocks, lim.max_threads, lim.max_grid_z, lim.nms_select_block) == (8, 128, 4, 32)
    else:
        assert (lim.max_blocks, lim.max_threads, lim.max_grid_z, lim.nms_select_block) == (65535, None, 65535, 128)


def test_the_cublas_c_api_comes_from_the_backend():
    api = gpuops.get_device("cuda").backend.cublas_api()
    assert all(callable(getattr(api, f)) for f in
               ("create", "destroy", "set_stream", "set_workspace", "gemm_strided_batched"))
    with pytest.raises(TypeError):
        backends.cpu().cublas_api()


@pytest.mark.skipif(not STANDIN, reason="the stand-in's counts")
def test_sync_accounting_is_the_backends():
    dev = gpuops.get_device("cuda")
    x = dev.asarray(np.arange(4, dtype=np.float32))
    syncs, launches = dev.host_sync_count(), dev.kernel_launch_count()
    dev.xp.exp(x)
    assert dev.kernel_launch_count() == launches + 1
    dev.to_host(x)
    assert dev.host_sync_count() == syncs + 1
    assert gpuops.get_device("cpu").kernel_launch_count() is None


def test_the_runtime_imports_no_testing_module():
    code = ("import sys, numpy as np, gpuops\n"
            "from onnx import TensorProto, helper\n"
            "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',"
            " [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2])],"
            " [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2])])\n"
            "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
            "gpuops.InferenceSession(m.SerializeToString(), device='auto').run(None, {'x': np.ones(2, np.float32)})\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpuops.testing')))")
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_named_backend_module_is_imported_and_asked_for_its_backend():
    code = ("import gpuops\n"
            "d = gpuops.get_device('cuda')\n"
            "print(type(d.backend).__name__, d.backend.name, d.backend.emulated)")
    r = _python(code, GPUOPS_CUDA_BACKEND="gpuops.testing.cuda_standin")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["StandinBackend", "gpuops.testing.cuda_standin", "True"]


@pytest.mark.parametrize("name,why", [("gpuops.no_such_module", "does not import"),
                                      ("gpuops.errors", "has no gpuops_backend")])
def test_a_module_that_provides_no_backend_is_a_device_error(name, why, monkeypatch):
    monkeypatch.setenv(backends.BACKEND_ENV, name)
    with pytest.raises(DeviceError, match=why):
        gpuops.get_device("cuda")
    assert _device.uses_standin()


def test_cupy_is_the_default(monkeypatch):
    for value in ("", "cupy", backends.DEFAULT_CUDA):
        monkeypatch.setenv(backends.BACKEND_ENV, value)
        assert backends.cuda_module_name() == backends.DEFAULT_CUDA and not _device.uses_standin()


def test_the_standin_needs_no_private_array_api_compat_module():
    r = _python("import sys; import gpuops.testing.cuda_standin as sd; sd.xp.clip(sd.xp.asarray([1., 5.]), 2, 3); "
                "print(sorted(m for m in sys.modules if m.startswith('array_api_compat')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
