"""Wheels carry cuda_kernels/ inside the package (gpuops/cuda_kernels); a clone keeps it at the top."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gpuops" / "cuda_kernels"
        shutil.copytree(Path(__file__).parent / "cuda_kernels", target, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPy})
