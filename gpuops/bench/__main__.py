"""``python -m gpuops.bench``: the same as ``gpuops bench``."""

from .runner import main

if __name__ == "__main__":
    raise SystemExit(main())
