"""Gates for tests that use onnxruntime as their reference where an older onnxruntime lacks the
feature, answers differently, or crashes the test process.

Python 3.10 tops out at onnxruntime 1.23, so there these tests skip (with the reason) rather than
fail on the oracle; newer Pythons resolve a newer onnxruntime and run them. ``packaging`` comes
with pytest."""

from __future__ import annotations

import onnxruntime
import pytest
from packaging.version import Version

ORT_VERSION = Version(onnxruntime.__version__)


def ort_older_than(minimum: str) -> bool:
    """Whether the installed onnxruntime's release is below ``minimum`` (pre-releases of
    ``minimum`` count as ``minimum``)."""
    return ORT_VERSION.release < Version(minimum).release


def requires_ort(minimum: str, what: str) -> pytest.MarkDecorator:
    """Skip unless onnxruntime >= ``minimum``; ``what`` names what the older one gets wrong."""
    return pytest.mark.skipif(ort_older_than(minimum),
                              reason=f"onnxruntime {ORT_VERSION} < {minimum}: {what}")
