"""The documentation users copy from: the troubleshooting page quotes real messages, the
example GitHub Actions workflow calls dd-accept the way its CLI parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from dd_accept.acceptance.catalog import ALL_CHECKS, CHECKS
from dd_accept.harness.cli import build_parser
from tests.helpers import run_cli

REPOSITORY = Path(__file__).parents[2]
DOCS = REPOSITORY / "docs"
PREFIX = "dd-accept: error: "


def _quoted_messages() -> list[str]:
    text = (DOCS / "troubleshooting.md").read_text()
    blocks = re.findall(r"```\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.startswith(PREFIX)]


def _source_text() -> str:
    files = [*(REPOSITORY / "src").rglob("*.py"), *(REPOSITORY / "scripts").glob("*.sh")]
    return "\n".join(path.read_text() for path in files)


def _covered(fragment: str, source: str) -> bool:
    """True when the fragment is made of the source's own text, with room only for the short
    values a message fills in (names, numbers): a message invented by the docs fails."""
    position, filled = 0, 0
    while position < len(fragment):
        length = 0
        for end in range(len(fragment), position + 5, -1):
            if fragment[position:end] in source:
                length = end - position
                break
        if length:
            position += length
        else:
            position, filled = position + 1, filled + 1
    return filled <= max(12, len(fragment) // 4)


def test_every_quoted_message_is_one_dd_accept_prints():
    messages, source = _quoted_messages(), _source_text()
    assert len(messages) >= 20
    for message in messages:
        for fragment in message.removeprefix(PREFIX).split("…"):
            assert _covered(fragment.strip(), source), f"not in the code: {fragment.strip()!r} (from {message!r})"


def test_the_coverage_rule_rejects_an_invented_message():
    assert not _covered("a jabberwocky gyred the zebra quux at 1.21 gigawatts", _source_text())


def test_the_engine_message_is_quoted_exactly():
    quoted = [m for m in _quoted_messages() if "no Docker engine answers; start one" in m]
    result = run_cli("cluster", "status", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 2 and result.stderr.strip() == quoted[0]


def _workflow() -> dict:
    return yaml.safe_load((DOCS / "github-actions-release-gate.yml").read_text())


def test_the_workflow_runs_the_gate_the_cli_accepts():
    steps = _workflow()["jobs"]["gate"]["steps"]
    run = next(step["run"] for step in steps if "make accept" in step.get("run", ""))
    command = shlex.split(run.replace("\\\n", " "))
    gate = next(part.split("=", 1)[1] for part in command if part.startswith("GATE="))
    arguments = next(part.split("=", 1)[1] for part in command if part.startswith("ARGS="))
    arguments = re.sub(r"\$\{\{[^}]*\}\}", "data-designer-slurm==1.0.0rc1", arguments)
    arguments = arguments.replace("$CANDIDATE", "candidate/x.whl")
    parsed = build_parser().parse_args(["gate", "--config", gate, *shlex.split(arguments)])
    assert parsed.sut == ["data-designer-slurm==1.0.0rc1", "candidate/x.whl"] and parsed.out
    # make accept GATE=… is what runs `dd-accept gate --config …`
    assert 'gate --config "${GATE}"' in (REPOSITORY / "scripts" / "accept.sh").read_text()
    verify = next(step["run"] for step in steps if "dd-accept verify" in step.get("run", ""))
    build_parser().parse_args(shlex.split(verify)[1:])


def test_the_workflow_caches_images_by_files_that_exist():
    steps = _workflow()["jobs"]["gate"]["steps"]
    key = next(step["with"]["key"] for step in steps if step.get("uses", "").startswith("actions/cache"))
    for pattern in re.findall(r"'dd-accept/([^']+)'", key):
        assert list(REPOSITORY.glob(pattern)), pattern
    summary = next(step["run"] for step in steps if "GITHUB_STEP_SUMMARY" in step.get("run", ""))
    assert "gate/gate.md" in summary


def _readme_check_ids() -> set[str]:
    """The ids in the check reference's table (docs/checks.md), with `{a,b}` and `<scenario>` expanded."""
    readme = (REPOSITORY / "docs" / "checks.md").read_text()
    table = readme[readme.index("# Checks (stable ids)") : readme.index("# What it finds")]
    ids: set[str] = set()
    for cell in re.findall(r"^\| `([^`]+)` \|", table, re.M):
        if cell.startswith("<scenario>."):
            ids |= {cell.replace("<scenario>", scenario) for scenario in CHECKS}
        elif match := re.fullmatch(r"(.*)\{(.*)\}", cell):
            ids |= {match.group(1) + mode for mode in match.group(2).split(",")}
        else:
            ids.add(cell)
    return ids


def test_the_readme_check_table_is_the_catalog():
    """Every registered check is documented, and the docs document no check that does not exist."""
    assert _readme_check_ids() == ALL_CHECKS
