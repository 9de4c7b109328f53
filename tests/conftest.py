import warnings


def pytest_configure(config):
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnx\..*")


def pytest_terminal_summary(terminalreporter):
    try:
        from tests.conformance.test_node_cases import CASES, RESULTS
    except Exception:
        return
    if RESULTS:
        passed = sum(1 for v in RESULTS.values() if v == "pass")
        terminalreporter.write_line(
            f"onnx node conformance: {passed} of {len(CASES)} cases pass ({len(RESULTS)} run)")
