"""Wheels carry cuda_kernels/ and cpu_kernels/ inside the package (gpuops/...); a clone keeps them at the top."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        for name in ("cuda_kernels", "cpu_kernels"):
            shutil.copytree(Path(__file__).parent / name, Path(self.build_lib) / "gpuops" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPy})
