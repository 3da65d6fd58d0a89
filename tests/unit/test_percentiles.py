"""One percentile definition, vLLM's (numpy's default, linear between the closest ranks),
wherever a number is printed: a check, the serving metrics, a gate."""

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dd_accept.acceptance.serving import serving_metrics
from dd_accept.base.events import ClientRequest
from dd_accept.base.percentiles import percentile

SOURCE = Path(__file__).parents[2] / "src" / "dd_accept"


def test_linear_interpolation_between_the_closest_ranks_as_numpy_takes_it():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5  # nearest rank would say 2
    assert abs(percentile([float(v) for v in range(1, 101)], 0.99) - 99.01) < 1e-9  # nearest rank: 99
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.0) == 1.0 and percentile([3.0, 1.0, 2.0], 1.0) == 3.0


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=60), st.floats(0, 1))
def test_a_percentile_lies_between_the_two_ranks_around_it_and_grows_with_the_fraction(values, fraction):
    ordered = sorted(values)
    found = percentile(values, fraction)
    position = (len(ordered) - 1) * fraction
    assert ordered[int(position)] - 1e-9 <= found <= ordered[min(int(position) + 1, len(ordered) - 1)] + 1e-9
    assert percentile(values, min(1.0, fraction + 0.1)) >= found - 1e-9


def test_the_serving_metrics_and_the_checks_say_the_same_p99_of_the_same_attempts():
    """The bundle that said p99 0.344 s in a check and 254 ms in its serving metrics for one
    phase: the same attempts now give the same number in both."""
    ttfts = [0.01 * i for i in range(1, 41)] + [0.344]
    attempts = [
        ClientRequest(mode="raw", record=i, attempt=0, outcome="ok", ttft_s=t, latency_s=t + 0.1, started=0.0, t=1.0)
        for i, t in enumerate(ttfts)
    ]
    assert abs(serving_metrics(attempts)["p99_ttft_ms"] - percentile(ttfts, 0.99) * 1000) < 1e-9


def test_no_module_defines_a_percentile_of_its_own():
    defined = [
        f"{path.relative_to(SOURCE)}:{node.name}"
        for path in SOURCE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and "percentile" in node.name and path.name != "percentiles.py"
    ]
    assert defined == ["acceptance/serving.py:_percentile"], defined  # the summary's thin caller of the one
