"""The HTML report in a real browser (Debian's headless Chromium): it renders its charts,
logs no console error and fetches nothing."""

import json
import re
import shutil
import subprocess

from dd_accept.reports.bundle import write_bundle
from dd_accept.reports.sanitize import Sanitizer
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


def _bundle(tmp_path):
    raw = tmp_path / "raw"
    run = raw / "runs" / "run-1"
    (run / "replicas").mkdir(parents=True)
    (raw / "results.json").write_text(json.dumps(_results("fail")))
    client = []
    for n, limit in enumerate([8, 8, 6, 6, 4, 4, 5]):
        client.append({"t": 100.0 + n, "kind": "admission", "event": "request_lease_acquired", "limit": limit})
        client.append(
            {
                "t": 100.5 + n,
                "kind": "request",
                "started": 100.0 + n,
                "status": 429 if n < 4 else 200,
                "outcome": "rate_limited" if n < 4 else "ok",
                "request_id": f"total-{n}.0",
            }
        )
    (run / "total.jsonl").write_text("".join(json.dumps(e) + "\n" for e in client))
    (run / "replicas" / "events-0.jsonl").write_text(
        "".join(
            json.dumps({"t": 100.0 + n, "kind": "upstream", "replica": 0, "status": 429 if n < 4 else 200}) + "\n"
            for n in range(7)
        )
    )
    start = "1970-01-01T00:01:43.000Z"  # 103 s: a signal inside the timeline
    (raw / "commands.jsonl").write_text(
        json.dumps({"argv": ["scancel", "--signal=TERM", "1.1"], "start": start}) + "\n"
    )
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(raw, out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    return out


def test_the_report_is_self_contained_and_draws_every_chart(tmp_path):
    html = (_bundle(tmp_path) / "report.html").read_text()
    assert "<script" not in html and not re.search(r"(src|href)=\"(https?:)?//", html), "nothing fetched"
    assert html.count("<svg") == 3  # admission limit, request timeline, replica outcomes
    assert 'class="limit"' in html and 'class="sig"' in html and "m429" in html
    assert "overload.total.attempts" in html


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
    assert dom.stdout.count("<svg") == 3 and "<path" in dom.stdout and "<rect" in dom.stdout
    assert ":CONSOLE(" not in dom.stderr, dom.stderr[-2000:]
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
