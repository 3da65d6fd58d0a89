"""Serving metrics by vLLM's definitions, computed from attempts whose numbers are known."""

import json

import pytest

from dd_accept.acceptance.serving import by_phase, client_attempts, serving_block, serving_metrics
from dd_accept.base.documents import problem
from dd_accept.base.events import ClientRequest, EventWriter, QueueGauge
from dd_accept.base.results import SCHEMA, PhaseRecord, ScenarioResult, write_results
from dd_accept.base.serving_names import unit_of
from dd_accept.reports.html import render_bundle
from dd_accept.reports.render import markdown


def _ok(started, ttft, offsets, latency):
    return ClientRequest(
        t=started + latency, mode="raw", record=0, attempt=1, outcome="ok", started=started, status=200,
        ttft_s=ttft, latency_s=latency, chunks=len(offsets), chunk_offsets_s=offsets,
    )  # fmt: skip


ATTEMPTS = [
    _ok(100.0, 0.1, [0.0, 0.01, 0.03], 0.2),  # ITL 10, 20 ms; TPOT (0.2-0.1)/2 = 50 ms
    _ok(101.0, 0.3, [0.0, 0.04], 0.5),  # ITL 40 ms; TPOT 200 ms
    ClientRequest(t=102.0, mode="raw", record=2, attempt=1, outcome="rate_limited", started=101.5, status=429),
    ClientRequest(t=104.0, mode="raw", record=3, attempt=1, outcome="error", started=103.0, error="ReadTimeout"),
]


def test_each_metric_follows_its_definition():
    """vLLM's calculate_metrics: numpy's linear-interpolation percentiles, population std."""
    m = serving_metrics(ATTEMPTS)
    assert (m["requests"], m["completed"]) == (4, 2)
    assert (m["error_rate"], m["rate_limited_rate"]) == (0.25, 0.25)
    assert m["duration_s"] == pytest.approx(4.0)  # first start 100.0, last end 104.0
    assert m["request_throughput"] == pytest.approx(0.5) and m["output_throughput"] == pytest.approx(5 / 4)
    ttft = {key: m[f"{key}_ttft_ms"] for key in ("mean", "median", "std", "p50", "p90", "p99")}
    assert ttft == pytest.approx({"mean": 200, "median": 200, "std": 100, "p50": 200, "p90": 280, "p99": 298})
    assert m["ttft_count"] == 2
    itl = {key: m[f"{key}_itl_ms"] for key in ("median", "p90", "p99")}
    assert itl == pytest.approx({"median": 20, "p90": 36, "p99": 39.6})  # ITL 10, 20, 40 ms
    assert m["mean_itl_ms"] == pytest.approx(70 / 3) and m["std_itl_ms"] == pytest.approx(12.472, abs=1e-3)
    assert m["itl_count"] == 3
    assert m["mean_tpot_ms"] == pytest.approx(125) and m["p99_tpot_ms"] == pytest.approx(198.5)
    assert m["median_e2el_ms"] == pytest.approx(350) and m["p99_e2el_ms"] == pytest.approx(497)
    assert all(unit_of(name) for name in m), [n for n in m if not unit_of(n)]


def test_the_suts_own_client_reports_tokens_and_no_stream_timing():
    """`mode: sut` attempts: the output tokens the client reported count; TTFT, ITL and TPOT
    are absent, never 0; without tokens or chunks there is no output throughput at all."""
    sut = [
        ClientRequest(t=11.0, mode="sut", record=0, attempt=1, outcome="ok", started=10.0, latency_s=1.0, tokens=64),
        ClientRequest(t=12.0, mode="sut", record=1, attempt=1, outcome="ok", started=10.5, latency_s=1.5, tokens=32),
    ]
    m = serving_metrics(sut)
    assert m["duration_s"] == pytest.approx(2.0) and m["request_throughput"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(48.0) and m["median_e2el_ms"] == pytest.approx(1250)
    assert not any(key.endswith(("_ttft_ms", "_itl_ms", "_tpot_ms")) for key in m)
    silent = [ClientRequest(t=11.0, mode="sut", record=0, attempt=1, outcome="ok", started=10.0, latency_s=1.0)]
    assert "output_throughput" not in serving_metrics(silent)


def test_no_completed_attempt_gives_rates_and_no_latencies():
    m = serving_metrics(ATTEMPTS[2:])
    assert m["completed"] == 0 and m["error_rate"] == 0.5 and "p99_ttft_ms" not in m
    assert serving_metrics([]) == {}


def test_a_client_that_hung_up_on_purpose_is_no_error():
    """The wire scenario's hangup and slow-reader parts leave every stream: 0 errors, not 100%."""
    left = [ClientRequest(t=12.0, mode="raw", record=i, attempt=0, outcome="hung_up", started=10.0, status=200)
            for i in range(3)]  # fmt: skip
    cut = [ClientRequest(t=12.0, mode="raw", record=3, attempt=0, outcome="truncated", started=10.0, status=200)]
    assert serving_metrics(left)["error_rate"] == 0.0
    assert serving_metrics(left + cut)["error_rate"] == 0.25, "a cut stream still is one"


def test_attempts_are_given_to_the_phase_in_which_they_began():
    phases = [PhaseRecord("drive", "partial", 99.0, 101.2), PhaseRecord("drive", "total", 101.2, 110.0)]
    measured = {p["title"]: p["metrics"] for p in by_phase(ATTEMPTS, phases)}
    assert measured["partial"]["requests"] == 2 and measured["total"]["requests"] == 2
    assert measured["total"]["completed"] == 0


def test_the_block_reads_the_clients_files_only_and_follows_the_results_schema(tmp_path):
    writer = EventWriter(tmp_path / "client.jsonl", "client")
    for attempt in ATTEMPTS:
        writer.write(attempt)
    writer.close()
    EventWriter(tmp_path / "queue.jsonl", "replica-0").write(QueueGauge(waiting=1, running=0))
    (tmp_path / "notes.jsonl").write_text('{"not": "an event"}\n')
    assert len(client_attempts(tmp_path)) == 4
    block = serving_block(tmp_path, [PhaseRecord("drive", "all", 0.0, 200.0)])
    document = {
        "schema": SCHEMA, "verdict": "pass", "allow_unsupported": False, "sut": {},
        "scenarios": [{"name": "streaming", "verdict": "pass", "started": 1.0, "ended": 2.0, "error": None,
                       "checks": [], "phases": [], "serving": block}],
    }  # fmt: skip
    assert problem(json.loads(json.dumps(document)), SCHEMA) is None
    marked = serving_block(tmp_path, [PhaseRecord("drive", "all", 0.0, 200.0)], {"all": "a stalled replica"})
    assert marked["phases"][0]["fault"] == "a stalled replica", "a fault by design is marked on its phase"
    document["scenarios"][0]["serving"] = marked
    assert problem(json.loads(json.dumps(document)), SCHEMA) is None
    assert problem(json.loads(json.dumps(document)), "dd-accept/results/v3") is not None, "v4 added the mark"
    assert serving_block(tmp_path / "empty", []) is None


def _results_with_serving(tmp_path):
    serving = {
        "metrics": serving_metrics(ATTEMPTS),
        "phases": [{"title": "drive", "metrics": serving_metrics(ATTEMPTS[:2])}],
    }
    scenario = ScenarioResult("streaming", started=1.0, ended=2.0, serving=serving)
    return write_results(tmp_path / "results.json", [scenario], {"spec": "x==1"}, False)


def test_summary_md_and_the_report_show_each_scenario_and_phase_with_units(tmp_path):
    results = _results_with_serving(tmp_path)
    text = markdown(results)
    assert "### Serving metrics" in text and "| TTFT p99 ms |" in text
    row = next(line for line in text.splitlines() if line.startswith("| streaming | "))
    assert "| 4 | 2 | 0.5 | 1.25 | 200 | 280 | 298 |" in row and "| 25.0% | 25.0% |" in row
    assert any(line.startswith("| streaming / drive | 2 | 2 |") for line in text.splitlines())
    page = render_bundle(tmp_path)
    assert "latency percentiles" in page.lower() and "p50 200 · p90 280 · p99 298 ms" in page
    assert "<th>TTFT p99 ms</th>" in page and "<script" not in page
