"""A mutation campaign: deliberate bugs, one at a time, each in a temporary copy of the repository,
and the tests that should catch it (``python -m tests.mutation [--quick]``, see ``__main__``).

Each mutant (:mod:`.mutants`) is a file, an exact text in it, its replacement and the pytest
arguments that must fail once the replacement is made. A mutant whose tests still pass "survives":
the tests are blind to that bug. Results are committed under ``benchmarks/results/<date>-mutation/``.
"""
