"""GPU telemetry sampled during a benchmark (nvidia-ml-py): memory, utilisation, power, clocks."""

from __future__ import annotations

import threading
import time


class GpuSampler:
    """``with GpuSampler(index) as s: ...`` then ``s.summary()``; a no-op without NVML."""

    def __init__(self, index: int = 0, period_s: float = 0.05):
        self.index, self.period = index, period_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = None
        self._nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            self._nvml = None

    def _sample(self) -> dict:
        n, h = self._nvml, self._handle
        util = n.nvmlDeviceGetUtilizationRates(h)
        return {"t": time.perf_counter(), "mem_used": n.nvmlDeviceGetMemoryInfo(h).used, "gpu_util": util.gpu,
                "mem_util": util.memory, "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000,
                "sm_clock_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)}

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception:
                return
            self._stop.wait(self.period)

    def __enter__(self):
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        keys = ["mem_used", "gpu_util", "mem_util", "power_w", "sm_clock_mhz"]
        return {k: {"max": max(s[k] for s in self.samples), "mean": sum(s[k] for s in self.samples) / len(self.samples)}
                for k in keys} | {"n_samples": len(self.samples)}
