"""``python -m gpuops`` and the ``gpuops`` command: the CLI, or a plain message when a runtime
dependency it imports is missing."""

import sys


def main(argv=None) -> int:
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as e:
        from .dependencies import missing_dependency

        message = missing_dependency(e.name or "")
        if message is None:
            raise
        print(f"gpuops: error: {message} ({e})", file=sys.stderr)
        return 1
    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
