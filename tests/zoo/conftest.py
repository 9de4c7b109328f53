import os

import pytest


@pytest.fixture(scope="module", autouse=True)
def _cwd_in_tmp(tmp_path_factory):
    """onnxruntime's tools write scratch files (sym_shape_infer_temp.onnx, <uuid>.data) into the working
    directory: keep them out of the repository."""
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("zoo-cwd"))
    yield
    os.chdir(old)
