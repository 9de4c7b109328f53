"""Fuzzing gpuops with Hypothesis: mutated ONNX models, feeds, out-of-range indices for the indexing
ops, MDF expressions and models. Properties: only ``GpuopsError``s escape; where onnxruntime (or
modeci-mdf) accepts the input, the results are equal; a session answers correctly after an error.

In CI the examples are few and derandomized (the ``ci`` profile); ``python -m tests.fuzz --minutes N``
runs a campaign with fresh random examples until the time is up.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("campaign", derandomize=False, database=None, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("GPUOPS_FUZZ_PROFILE", "ci"))


def examples(n: int) -> int:
    """``n`` examples in CI, scaled up by ``GPUOPS_FUZZ_SCALE`` in a campaign."""
    return max(1, round(n * float(os.environ.get("GPUOPS_FUZZ_SCALE", "1"))))
