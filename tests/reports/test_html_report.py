"""The HTML report in a real browser (Debian's headless Chromium): it renders its charts,
logs no console error and fetches nothing."""

import json
import re
import shutil
import subprocess

from dd_accept.base.events import (
    ADMISSION_PROBE_ID,
    ADMISSION_PROBE_PATH,
    AdmissionChange,
    ClientRequest,
    QueueGauge,
    SutAttemptRecord,
    UpstreamAttempt,
)
from dd_accept.reports.bundle import write_bundle
from dd_accept.reports.sanitize import Sanitizer
from tests.helpers import run_cli
from tests.reports.test_bundle import _context, _results

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def _jsonl(events):
    return "".join(json.dumps(event.to_json()) + "\n" for event in events)


def _bundle(tmp_path):
    raw = tmp_path / "raw"
    run = raw / "runs" / "run-1"
    (run / "replicas").mkdir(parents=True)
    results = {**_results("fail"), "cluster": {"kind": "docker", "slurm_release": "24.11", "proctrack": "cgroup"}}
    metrics = {"requests": 7.0, "completed": 3.0, "error_rate": 0.0, "rate_limited_rate": 0.57}
    results["scenarios"][0]["serving"] = {"metrics": metrics, "phases": [], "events": "run-1"}
    (raw / "results.json").write_text(json.dumps(results))
    client = []
    for n, limit in enumerate([8, 8, 6, 6, 4, 4, 5]):
        client.append(AdmissionChange(t=100.0 + n, event="request_lease_acquired", limit=limit))
        client.append(
            ClientRequest(
                t=100.5 + n, mode="sut", record=n, attempt=0, started=100.0 + n, status=429 if n < 4 else 200,
                outcome="rate_limited" if n < 4 else "ok", request_id=f"total-{n}.0",
            )
        )  # fmt: skip
    (run / "total.jsonl").write_text(_jsonl(client))
    upstream = [
        UpstreamAttempt(t=100.0 + n, replica=0, path="/v1/chat/completions", outcome="ok", started=100.0 + n,
                        duration_s=0.1, status=429 if n < 4 else 200, request_id=f"total-{n}.0")
        for n in range(6)
    ]  # fmt: skip
    # request total-6.0 failed over: replica 0 held it back past the proxy's timeout, replica 1 served it
    upstream += [
        UpstreamAttempt(t=106.05, replica=1, path="/v1/chat/completions", outcome="ok", started=106.05,
                        duration_s=0.1, status=200, request_id="total-6.0"),
        UpstreamAttempt(t=105.9, replica=0, path="/v1/chat/completions", outcome="abandoned", started=105.9,
                        duration_s=0.1, status=None, request_id="total-6.0"),
    ]  # fmt: skip
    # the SUT's own attempt records (a telemetry run's): two placed on their requests, one on none
    sut = [
        SutAttemptRecord(phase="total", backend="0", status="429", request_id="total-0.0", attempt_started=100.0),
        SutAttemptRecord(phase="total", backend="0", status="no response", request_id="total-6.0",
                         attempt_started=105.9),
        SutAttemptRecord(phase="total", backend="?", status="200"),
    ]  # fmt: skip
    (run / "sut").mkdir()
    (run / "sut" / "attempt-records.jsonl").write_text(_jsonl(sut))
    # the harness's own admission probes: a 400 (admitted, the body refused) or a 429 by
    # design, never the SUT's error; and one of a bundle made when the probe was a GET
    upstream += [
        UpstreamAttempt(t=99.0 + n / 10, replica=1, path=ADMISSION_PROBE_PATH, outcome="ok", started=99.0 + n / 10,
                        duration_s=0.01, status=400 if n else 429, request_id=ADMISSION_PROBE_ID)
        for n in range(2)
    ] + [UpstreamAttempt(t=99.3, replica=1, path="/dd-accept/admission-probe", outcome="ok", started=99.3,
                         duration_s=0.01, status=404)]  # fmt: skip
    queue = [QueueGauge(t=t, waiting=w, running=0) for t, w in ((100.0, 0), (101.0, 2), (104.0, 0))]
    (run / "replicas" / "events-0.jsonl").write_text(_jsonl(upstream + queue))
    # a drain phase: TERM at 110, KILL at 122; one stream completes (whole, as its replica
    # recorded it), one is forced, one is lost
    (run / "replicas" / "events-3.jsonl").write_text(
        _jsonl([UpstreamAttempt(t=112.0, replica=3, path="/v1/chat/completions", outcome="ok", started=108.0,
                                duration_s=4.0, status=200, request_id="allowance-0", data_events=41)])
    )  # fmt: skip
    streams = [
        ClientRequest(
            t=112.0,
            started=108.0,
            mode="raw",
            record=0,
            attempt=0,
            outcome="ok",
            done=True,
            ttft_s=0.02,
            request_id="allowance-0",
            chunks=41,
        ),
        ClientRequest(t=122.1, started=108.5, mode="raw", record=1, attempt=0, outcome="error"),
        ClientRequest(t=111.0, started=109.0, mode="raw", record=2, attempt=0, outcome="error"),
    ]
    (run / "allowance.jsonl").write_text(_jsonl(streams))
    mark = {"phase": "allowance", "stop_at": 110.0, "forced_at": 122.0, "window_s": 10, "allowance_s": 12}
    (run / "drain-marks.jsonl").write_text(json.dumps(mark) + "\n")
    start = "1970-01-01T00:01:43.000Z"  # 103 s: a signal inside the timeline
    (raw / "commands.jsonl").write_text(
        json.dumps(
            {
                "argv": ["bash", "-c", "{ echo y; yes n; } | scancel ...", "scancel", "--signal=TERM", "1.1"],
                "start": start,
            }
        )
        + "\n"
    )
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(raw, out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    return out


def test_the_report_is_self_contained_and_draws_every_chart(tmp_path):
    html = (_bundle(tmp_path) / "report.html").read_text()
    assert "<script" not in html and not re.search(r"(src|href)=\"(https?:)?//", html), "nothing fetched"
    # admission limit + request timeline (total), drain timeline + request timeline (allowance),
    # queue depth per replica, replica outcomes, the latency CDF
    assert html.count("<svg") == 7 and "TTFT distribution — run-1" in html and "allowance (1)" in html
    assert 'class="limit"' in html and 'class="sig"' in html and "m429" in html
    assert "<title>scancel --signal=TERM 1.1</title>" in html, "a signal sent through a script: its $0 and arguments"
    assert "overload.total.attempts" in html and ", judged on Slurm 24.11, cgroup; ran 1970-01-01 " in html
    assert "Queue depth per replica" in html and "replica 0: deepest queue 2" in html
    assert "in flight at TERM: 1 completed, 1 forced, 1 lost" in html
    assert 'class="window"' in html and 'class="term"' in html and 'class="allowance"' in html
    # each request's upstream attempts on its line, in the order they began, as the replicas served them
    assert html.count("<title>attempt 1: replica 0, 429</title>") == 4, "the four 429s, one each"
    assert (
        "<title>attempt 1: replica 0, abandoned</title>" in html and "<title>attempt 2: replica 1, 200</title>" in html
    )
    assert 'fill="#9e9e9e"' in html and 'fill="#f9a825"' in html
    # and beside them the SUT's own record of each attempt, where it could be placed
    assert html.count('class="sut-record"') == 2, "one placed square per placed record"
    assert "<title>the SUT logged: backend 0, no response</title>" in html
    assert "blue squares: the SUT's own record of each attempt (3 records" in html and "1 match no attempt" in html
    assert html.count("blue squares") == 1, "only the phase the records are of"
    assert "<title>replica 1: 3 of the harness&#x27;s admission probes</title>" in html, "grey, not red"
    assert "of status 404" not in html and "of status 400" not in html


def _ids_and_links(html):
    return set(re.findall(r' id="([^"]+)"', html)), set(re.findall(r' href="#([^"]+)"', html))


def test_failures_come_first_and_every_check_links_its_charts_and_evidence(tmp_path):
    bundle = _bundle(tmp_path)
    html = (bundle / "report.html").read_text()
    ids, links = _ids_and_links(html)
    assert links and links <= ids, links - ids  # every in-page link lands
    results = json.loads((bundle / "results.json").read_text())
    failing = [c["id"] for s in results["scenarios"] for c in s["checks"] if c["verdict"] != "pass"]
    assert failing and html.index('id="not-passing"') < html.index('id="scenario-'), "failures first"
    assert all(f"check-{c}" in ids and f"#check-{c}" in html for c in failing)
    # a scenario whose events are in the bundle: each of its checks links to the run's charts and files
    run = next(s["serving"]["events"] for s in results["scenarios"] if s.get("serving"))
    assert f"run-{run}" in ids and f'href="events/{run}/"' in html and (bundle / "events" / run).is_dir()
    assert "cannot vouch for itself" in html
    report = run_cli("report", str(bundle), "--format", "html")
    assert report.returncode == 0 and "cannot vouch for itself" not in report.stdout, "report's banner says it"


def test_the_report_renders_in_headless_chromium_without_console_errors(tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is required (scripts/setup.sh installs it)"
    report = _bundle(tmp_path) / "report.html"
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == 7 and "<path" in dom.stdout and "<rect" in dom.stdout
    assert ":CONSOLE(" not in dom.stderr, dom.stderr[-2000:]
    ids, links = _ids_and_links(dom.stdout)  # as the browser built the page
    assert "not-passing" in ids and links and links <= ids, links - ids
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--window-size=1000,1600",
            f"--screenshot={shot}",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000, "a rendered page, not a blank one"
