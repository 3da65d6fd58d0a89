"""The `dd-accept` command line.

Exit statuses are a contract with release gates: 0 pass, 1 a check failed, 2 usage or
environment error (always one clear line, never a traceback), 130 interrupted (after
cleaning up what this invocation started).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.markup import escape
from rich.table import Table

from dd_accept import __version__
from dd_accept.acceptance.request import RunRequest, scenario_options
from dd_accept.acceptance.scenarios import SCENARIO_NAMES, SCENARIOS
from dd_accept.base.documents import checked
from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_PASS, EXIT_USAGE, DDAcceptError, UsageError
from dd_accept.base.options import (
    add_arguments,
    build,
    given,
    parse_argv_values,
)
from dd_accept.base.regressions import REGRESSION_METRICS, SERVING_TOLERANCE
from dd_accept.base.shown_paths import shown_path
from dd_accept.base.state import state_root
from dd_accept.deployment.backends.vllm import BackendOptions
from dd_accept.harness.checks_command import add_checks_command
from dd_accept.harness.console import ConsoleListener, fail_line
from dd_accept.harness.doctor import run_checks
from dd_accept.harness.doctor import to_json as doctor_document
from dd_accept.harness.dry_run import print_plan
from dd_accept.harness.gate import describe_gate, resolve_suts, run_gate
from dd_accept.harness.gate_file import load_gate
from dd_accept.harness.runner import default_out, parse_sut, run
from dd_accept.node.loadclient.workload import parse_header
from dd_accept.reports import compare, history, render
from dd_accept.reports.audit import Baseline, audit, read_baseline
from dd_accept.reports.html import render_bundle
from dd_accept.reports.reading import ReadingPolicy, Shown, banner_html, banner_markdown, opened_verified, read_verified
from dd_accept.reports.share import sanitize_paths
from dd_accept.reports.signing import load_private_key, load_public_key
from dd_accept.reports.verify import Policy, facts_lines, verify
from dd_accept.slurm_docker import engine, images
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.slurm_docker.sut_image import build_node_image
from dd_accept.slurm_docker.sweep import list_clusters
from dd_accept.sut.profile import DrainTiming, choose_profile, load_profile
from dd_accept.sut.spec import DEFAULT_SUT
from dd_accept.sut.wheelhouse import build_wheelhouse

DEFAULT_CLUSTER = "dd-accept"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2, as for every other bad input, and
    no option is taken from its first letters (`--replica` is not `--replicas`: a typo in a CI
    job must not become another option the day one is added that shares its start)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail_line(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_USAGE)


def _interrupt_on_term() -> None:
    """Treat SIGTERM like Ctrl-C so the same cleanup paths run when CI cancels a job."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# ---- cluster ------------------------------------------------------------------------------
def _cmd_cluster_build(args: argparse.Namespace, console: ConsoleListener) -> int:

    release = _cluster_options(args).release
    client = engine.connect()
    with console:
        base = images.build_base(client, console, release)
        layer = images.build_slurm_layer(client, console, release)
    for result in (base, layer):
        state = f"built in {result.seconds:.1f}s" if result.built else "up to date"
        console.out.print(f"{result.tag}  {state}")
    return EXIT_PASS


def _cmd_cluster_up(args: argparse.Namespace, console: ConsoleListener) -> int:

    options = _cluster_options(args)
    spec = ClusterSpec(
        name=args.name,
        nodes=args.nodes,
        cpus_per_node=args.cpus_per_node,
        subnet=args.subnet,
        slurm=options.release,
        proctrack=options.proctrack,
    )
    client = engine.connect()
    with console:
        image = images.ensure_images(client, console, spec.slurm)
        console.on_step(f"starting cluster {spec.name} ({spec.nodes} nodes, Slurm {spec.slurm}, {spec.proctrack})")
        cluster = SlurmCluster(spec, image=image, client=client, keep=True)  # until `cluster down`
        cluster.up(ready_timeout=args.ready_timeout)
    console.out.print(
        f"cluster {spec.name} is up: {spec.nodes} node(s) idle; "
        f"`dd-accept cluster exec --name {spec.name} -- sinfo`, `dd-accept cluster down --name {spec.name}`"
    )
    return EXIT_PASS


def _cmd_cluster_down(args: argparse.Namespace, console: ConsoleListener) -> int:

    cluster = SlurmCluster.attach(args.name)
    removed = cluster.down()
    console.out.print(f"cluster {args.name} removed ({len(removed)} objects)")
    return EXIT_PASS


def _cmd_cluster_status(args: argparse.Namespace, console: ConsoleListener) -> int:

    client = engine.connect()
    names = [args.name] if args.name else sorted(list_clusters(client))
    statuses = {name: SlurmCluster.attach(name, client).status() for name in names}
    console.emit({"schema": "dd-accept/cluster-status/v1", "clusters": [s.to_json(n) for n, s in statuses.items()]})
    if not names:
        console.out.print("no dd-accept clusters on this engine")
    for name, status in statuses.items():
        table = Table(title=f"cluster {name}")
        for column in ("kind", "id", "state", "detail"):
            table.add_column(column)
        for node in status.nodes:
            table.add_row("node", node.name, node.state, f"{node.cpus} CPUs")
        for job in status.jobs:
            table.add_row("job", job.id, job.state, f"{job.name} {job.nodes} {job.nodelist}")
        for step in status.steps:
            table.add_row("step", step.id, "RUNNING", f"{step.name} {step.nodelist}")
        console.table(table)
    return EXIT_PASS


def _cmd_cluster_exec(args: argparse.Namespace, console: ConsoleListener) -> int:

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("cluster exec needs a command after `--`, e.g. `dd-accept cluster exec -- sinfo`")
    cluster = SlurmCluster.attach(args.name)
    record = cluster.exec(command, node=args.node, timeout=args.timeout)
    sys.stdout.write(record.stdout)
    sys.stderr.write(record.stderr_tail)
    if record.timed_out:
        fail_line(f"command timed out after {args.timeout:.0f}s")
    return int(record.exit_code or 0) if not record.timed_out else 124


def _cmd_cluster_prune(args: argparse.Namespace, console: ConsoleListener) -> int:
    import shutil

    client = engine.connect()
    removed = engine.remove_labelled(client, engine.find_labelled(client))
    shutil.rmtree(state_root() / "clusters", ignore_errors=True)
    if args.images:
        removed += engine.remove_images(client, engine.LABEL_IMAGE_RECIPE)
    console.out.print(f"removed {len(removed)} dd-accept objects")
    for item in removed:
        console.info(f"  {item}")
    return EXIT_PASS


def _cmd_sut_prepare(args: argparse.Namespace, console: ConsoleListener) -> int:

    spec = parse_sut(args.sut, args.profile)
    profile = load_profile(Path(args.profile)) if args.profile else None
    client = engine.connect()
    with console:
        wheelhouse = build_wheelhouse(spec, console)
        choice = choose_profile(wheelhouse.sut_wheels, profile, spec.display)
        image = build_node_image(client, wheelhouse, console)
    # Whole digests in sha256sum's format, so they can be checked with `sha256sum -c`.
    print(f"SUT {spec.display} ({choice.describe()}); wheel digests:")
    for wheel in wheelhouse.sut_wheels:
        print(f"{wheel.sha256}  {wheel.file}")
    print(f"{len(wheelhouse.wheels)} wheels in the wheelhouse; wheelhouse digest {wheelhouse.digest}")
    print(f"node image {image.tag}")
    return EXIT_PASS


def _cmd_run(args: argparse.Namespace, console: ConsoleListener) -> int:
    try:
        drain = build(DrainTiming, parse_argv_values(args, DrainTiming))
        cluster = build(ClusterOptions, parse_argv_values(args, ClusterOptions))
        backend = build(BackendOptions, parse_argv_values(args, BackendOptions))
        for header in args.client_header:
            parse_header(header)
    except ValueError as error:
        raise UsageError(str(error)) from None
    request = RunRequest(
        scenario=args.scenario,
        sut=args.sut,
        profile=args.profile,
        out=Path(args.out) if args.out else None,
        options=scenario_options(lambda model: parse_argv_values(args, model)),
        drain=drain,
        cluster=cluster,
        backend=backend,
        allow_unsupported=args.allow_unsupported,
        seed=args.seed,
        sign_key=Path(args.key) if args.key else None,
        client_headers=tuple(args.client_header),
        parallel=args.parallel,
        keep_cluster=args.keep_cluster,
        checks=tuple(args.check) if args.check else None,
    )
    return print_plan(request) if args.dry_run else run(request, console)


def _whole(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        return value

    return parse


def _cmd_gate(args: argparse.Namespace, console: ConsoleListener) -> int:

    gate = load_gate(Path(args.config))
    suts = resolve_suts(gate, args.sut)
    out = Path(args.out or gate.gate.out or default_out(f"gate-{gate.gate.name}"))
    sign_key = args.key or gate.gate.sign_key
    if sign_key:
        load_private_key(Path(sign_key))  # a bad key is said once, before any release runs
    if args.check_only:
        print(describe_gate(gate, suts, Path(args.config).name))
        return EXIT_PASS
    return run_gate(gate, suts, out, console, Path(sign_key) if sign_key else None)


def _cmd_compare(args: argparse.Namespace, console: ConsoleListener) -> int:

    policy = _reading_policy(args)
    baseline = read_verified(Path(args.baseline), "compare", policy)
    candidate = read_verified(Path(args.candidate), "compare", policy)
    comparison = compare.compare(
        baseline.results, candidate.results, args.tolerance, args.serving_tolerance, (baseline, candidate)
    )
    regressed = args.fail_on_regression and comparison.regressed
    code = EXIT_CHECK_FAILED if regressed else EXIT_PASS
    console.emit(compare.to_json(comparison, code))
    if args.format == "md":
        sys.stdout.write(compare.to_markdown(comparison))
    elif args.format == "html":
        sys.stdout.write(compare.to_html(comparison))
    elif args.format == "json":
        print(json.dumps(console.document, indent=2))
    else:
        for verified, line in compare.standing_lines(comparison):
            _standing(console, verified, line)
        console.table(compare.to_table(comparison))
        console.table(compare.serving_table(comparison))
    if regressed:
        if comparison.regressions:
            print(f"dd-accept compare: {len(comparison.regressions)} check(s) regressed", file=sys.stderr)
        for worse in [*comparison.metric_regressions, *comparison.serving_regressions]:
            print(f"dd-accept compare: worse than the baseline: {worse.describe()}", file=sys.stderr)
    return code


def _reading_policy(args: argparse.Namespace) -> ReadingPolicy:
    """The one verification `report`, `compare` and `history` run before they show a bundle."""
    public_key = load_public_key(Path(args.key)) if args.key else None
    return ReadingPolicy(allow_unverified=args.allow_unverified, public_key=public_key)


def _standing(console: ConsoleListener, verified: bool, line: str) -> None:
    """A bundle's verification above what is shown of it; NOT verified in bold red on a terminal."""
    console.out.print(line, style=None if verified else "bold red", markup=False, soft_wrap=True)


def _cmd_history(args: argparse.Namespace, console: ConsoleListener) -> int:

    bundles = history.find_bundles([Path(p) for p in args.paths])
    chosen = [(Path(target), render) for target, render in ((args.html, history.to_html), (args.csv, history.to_csv))
              if target]  # fmt: skip
    _check_outputs([target for target, _ in chosen], bundles)
    outputs = dict(chosen)
    points = history.load_points(bundles, _reading_policy(args))
    trail = history.build_history(points, args.tolerance)
    write_all({target: render(trail) for target, render in outputs.items()}, "history")
    evidence = Table(title=f"dd-accept history: {len(points)} bundles, how each verified")
    for column in ("bundle", "started (UTC)", "sut", "evidence"):
        evidence.add_column(column)
    for point in points:
        standing = escape(point.standing) if point.shown.verified else f"[bold red]{escape(point.standing)}[/bold red]"
        evidence.add_row(point.name, history.iso(point.time), point.sut, standing)
    console.table(evidence)
    table = Table(title=f"dd-accept history: {len(points)} bundles, oldest first")
    for column in ("series", "unit", "values", "first", "last", "min", "max", "flagged"):
        table.add_column(column)
    for entry in trail.series:
        known = [v for v in entry.values if v is not None]
        flags = "; ".join(f"{points[i].name}: {why}" for i, why in enumerate(entry.flags) if why)
        numbers = (f"{v:.4g}" for v in (known[0], known[-1], min(known), max(known)))
        table.add_row(entry.key, entry.unit, str(len(known)), *numbers, f"[red]{flags}[/red]" if flags else "")
    console.table(table)
    for point, name, why in trail.flagged:
        print(f"flagged: {name} in {point}: {why}", file=sys.stderr)
    if args.fail_on_change and trail.flagged:
        print(f"dd-accept history: {len(trail.flagged)} change(s) beyond the tolerance", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_PASS


def _check_outputs(targets: list[Path], inputs: list[Path]) -> None:
    """Output files that are new or plain files, each named once, and never inside an input."""
    resolved = [target.resolve() for target in targets]
    if len(set(resolved)) != len(resolved):
        raise UsageError("history: --html and --csv name the same file")
    for target, where in zip(targets, resolved, strict=True):
        if any(where == bundle.resolve() or bundle.resolve() in where.parents for bundle in inputs):
            raise UsageError(f"history: {shown_path(target)} is inside a bundle it reads; write it elsewhere")
        refuse_missing_directory(where, target, "history")


def refuse_missing_directory(where: Path, target: Path, what: str) -> None:
    """An output file whose directory does not exist is a usage error, before anything runs."""
    if not where.parent.is_dir():
        raise UsageError(f"{what}: cannot write {shown_path(target)}: its directory does not exist")


def write_all(files: dict[Path, str], what: str) -> None:
    """Each file whole or not at all: written beside its target, then renamed over it."""
    written: list[Path] = []
    try:
        for target, text in files.items():
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_text(text)
            written.append(temporary)
        for temporary, target in zip(written, files, strict=True):
            temporary.replace(target)
    except OSError as error:
        for temporary in written:
            temporary.unlink(missing_ok=True)
        raise UsageError(f"{what}: cannot write its output: {error.strerror}") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.10, got {text!r}") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 10 (such as 0.10 for 10%), got {text!r}")
    return value


def _below_one(text: str) -> float:
    """A tolerance for a number where lower is worse: 1 or more would accept a knee of 0."""
    value = _fraction(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and below 1 (such as 0.4), got {text!r}")
    return value


def _cmd_audit(args: argparse.Namespace, console: ConsoleListener) -> int:

    baseline = read_baseline(Path(args.baseline)) if args.baseline else None
    everything = audit([Path(p) for p in args.paths], licences=args.licences)
    if args.write_baseline:
        target = Path(args.write_baseline)
        refuse_missing_directory(target, target, "audit")
        written = Baseline.of(everything)
        target.write_text(written.text())
        print(f"dd-accept audit: {len(written.accepted)} finding(s) written to {shown_path(target)}")
        return EXIT_PASS
    findings = [f for f in everything if baseline is None or not baseline.accepts(f)]
    accepted = len(everything) - len(findings)
    code = EXIT_CHECK_FAILED if findings else EXIT_PASS
    document = {"schema": "dd-accept/audit/v1", "clean": not findings, "exit_status": code, "paths": len(args.paths)}
    console.emit({**document, "accepted": accepted, "findings": [finding.to_json() for finding in findings]})
    for finding in findings:
        print(finding)  # location, rule and the line as sanitized: never the matched text
    also = f"; {accepted} accepted by the baseline" if accepted else ""
    if findings:
        print(f"dd-accept audit: {len(findings)} finding(s){also}", file=sys.stderr)
    else:
        print(f"dd-accept audit: clean ({len(args.paths)} path(s){also})")
    return code


def _cmd_sanitize(args: argparse.Namespace, console: ConsoleListener) -> int:
    shared = sanitize_paths([Path(p) for p in args.paths], Path(args.out))
    for location, why in shared.skipped:
        print(f"not copied: {location} ({why})", file=sys.stderr)
    report = shared.sanitizer.report()
    for entry in report["by_rule"]:  # type: ignore[union-attr]
        print(f"{entry['rule']}: {entry['count']}")
    total = sum(entry["count"] for entry in report["by_rule"])  # type: ignore[union-attr]
    print(f"dd-accept sanitize: {len(shared.written)} file(s) written to {Path(args.out).name}/, {total} redaction(s)")
    return EXIT_PASS


def _cmd_verify(args: argparse.Namespace, console: ConsoleListener) -> int:

    pubkey = Path(args.key) if args.key else None
    policy = Policy(args.require_pass, tuple(args.require_check), args.require_sut)
    bundle = Path(args.bundle)
    verification = verify(bundle, [Path(w) for w in args.wheel], pubkey, args.require_signature, policy)
    console.emit(verification.to_json(bundle.name))
    for problem in verification.problems + verification.unmet:
        print(problem)
    for line in facts_lines(verification):
        print(line)
    print(f"signature: {verification.signature}")
    if verification.problems:
        print(f"dd-accept verify: {len(verification.problems)} problem(s): the bundle does not verify", file=sys.stderr)
    elif verification.unmet:
        unmet = f"{len(verification.unmet)} problem(s): the bundle is whole but does not meet the policy"
        print(f"dd-accept verify: {unmet}", file=sys.stderr)
    else:
        proven = "made by the key holder" if verification.signature.startswith("verified") else "whole (integrity only)"
        print(
            "dd-accept verify: every digest matches, the provenance names this manifest and agrees with every "
            f"check in the results, the audit is clean: the bundle is {proven}"
        )
    return verification.exit_status


def _cmd_report(args: argparse.Namespace, console: ConsoleListener) -> int:
    with opened_verified(Path(args.bundle), "report", _reading_policy(args)) as (directory, shown):
        results = shown.results
        if args.format == "html":
            sys.stdout.write(render_bundle(directory, banner_html(shown)))
        elif args.format == "json":  # results.json itself, as it verified against the schema it names
            print(json.dumps(results, indent=2))
        elif args.format == "md":
            sys.stdout.write(banner_markdown(shown) + "\n" + render.markdown(results))
        else:
            sys.stdout.write(render.junit(results))
    _report_standing(shown)
    return EXIT_PASS


def _report_standing(shown: Shown) -> None:
    """On stderr for every format: JUnit XML and results.json have no place for it that their
    schemas allow, and a person redirecting the HTML still sees it."""
    print(f"dd-accept report: {shown.name}: {shown.verification.standing}", file=sys.stderr)


def _cmd_doctor(args: argparse.Namespace, console: ConsoleListener) -> int:

    findings = run_checks()
    code = EXIT_PASS if all(f.ok or f.optional for f in findings) else EXIT_USAGE
    console.emit(doctor_document(findings, code))
    table = Table(title="dd-accept doctor")
    for column in ("check", "status", "observed", "fix"):
        table.add_column(column)
    for finding in findings:
        if finding.ok:
            status = "[green]ok[/green]"
        else:
            status = "[yellow]not available[/yellow]" if finding.optional else "[red]problem[/red]"
        table.add_row(finding.name, status, finding.observed, "" if finding.ok else finding.fix)
    console.table(table)
    return code


# ---- parser -------------------------------------------------------------------------------
def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _add_cluster_options(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """Some of `run`'s cluster options (their one definition), for a `cluster` action."""
    add_arguments(parser.add_argument, ClusterOptions, only=names)


def _cluster_options(args: argparse.Namespace) -> ClusterOptions:
    return build(ClusterOptions, given(ClusterOptions, lambda dest: getattr(args, dest, None)))


def add_sut_options(parser: argparse.ArgumentParser) -> None:

    parser.add_argument(
        "--sut",
        default=DEFAULT_SUT,
        metavar="SUT",
        help="a requirement, a .whl, a directory of wheels, or a source directory (default: %(default)s)",
    )
    parser.add_argument(
        "--profile", metavar="PROFILE.toml", help="SUT profile file (default: the built-in profile matching the SUT)"
    )


def add_public_key(parser: argparse.ArgumentParser) -> None:
    """`verify`'s and the readers' `--key`: one option, so a key checks a signature the same way in each."""
    parser.add_argument(
        "--key",
        "--pubkey",
        metavar="PUBLIC.pem",
        help="Ed25519 public key the provenance's signature must verify with, the pair of `run --key` "
        "(default: the signature is not checked)",
    )


def add_reading_options(parser: argparse.ArgumentParser) -> None:
    """What `report`, `compare` and `history` take to read a bundle: each verifies it first,
    as `verify` does, and refuses one that does not verify unless told to show it."""
    parser.add_argument(
        "--allow-unverified",
        action="store_true",
        help="show a bundle that does not verify (an edited file, no manifest), marked NOT verified with the "
        "reason (default: refuse it, exit 2, naming what differs)",
    )
    add_public_key(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dd-accept",
        description="Acceptance harness for Slurm-hosted LLM runtimes, on a real Slurm cluster in Docker.",
        epilog="Exit status: 0 pass, 1 a check failed, 2 usage or environment error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"dd-accept {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    parser.add_argument("--no-color", action="store_true", help=_NO_COLOR_HELP)
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)

    doctor = commands.add_parser("doctor", help="check the machine and print the fix for each problem")
    doctor.set_defaults(handler=_cmd_doctor)

    cluster = commands.add_parser("cluster", help="build, start, inspect and remove the dockerized Slurm cluster")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    cluster.set_defaults(handler=lambda args, console: cluster.print_help() or EXIT_USAGE)

    build = actions.add_parser("build", help="build the node images from Debian packages (no registry)")
    _add_cluster_options(build, ("slurm",))
    build.set_defaults(handler=_cmd_cluster_build)

    up = actions.add_parser("up", help="start a controller and N compute nodes; returns when all are idle")
    up.add_argument("--name", default=DEFAULT_CLUSTER, metavar="NAME", help="cluster name (default: %(default)s)")
    up.add_argument("--nodes", default="2", metavar="N", help="compute nodes, 1-64 (default: %(default)s)")
    up.add_argument(
        "--cpus-per-node", default="16", metavar="N", help="CPUs Slurm declares per node (default: %(default)s)"
    )
    up.add_argument("--subnet", metavar="CIDR", help="IPv4 subnet for the internal network (default: chosen by Docker)")
    up.add_argument(
        "--ready-timeout",
        type=_positive,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for every node to be idle (default: %(default)g)",
    )
    _add_cluster_options(up, ("slurm", "slurm_config"))
    up.set_defaults(handler=_cmd_cluster_up)

    down = actions.add_parser("down", help="remove a cluster's containers, network, volumes and run directory")
    down.add_argument("--name", default=DEFAULT_CLUSTER, metavar="NAME", help="cluster name (default: %(default)s)")
    down.set_defaults(handler=_cmd_cluster_down)

    status = actions.add_parser("status", help="nodes, jobs and steps as a table")
    status.add_argument("--name", metavar="NAME", help="one cluster (default: every dd-accept cluster)")
    status.set_defaults(handler=_cmd_cluster_status)

    execute = actions.add_parser("exec", help="run a command on a node; exits with its status")
    execute.add_argument("--name", default=DEFAULT_CLUSTER, metavar="NAME", help="cluster name (default: %(default)s)")
    execute.add_argument("--node", default="ctl", metavar="NODE", help="ctl or nodeN (default: %(default)s)")
    execute.add_argument(
        "--timeout", type=_positive, default=300.0, metavar="SECONDS", help="stop waiting after (default: %(default)g)"
    )
    execute.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    execute.set_defaults(handler=_cmd_cluster_exec)

    run = commands.add_parser(
        "run",
        help="run acceptance scenarios against the SUT; exit 0 pass, 1 a check failed, 2 error",
        description="Run acceptance scenarios on a fresh dockerized Slurm cluster (or, with --cluster existing, "
        "on the Slurm cluster this machine is a login node of) and judge the SUT.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help=f"one of: {', '.join((*SCENARIO_NAMES, 'all'))}")
    add_sut_options(run)
    run.add_argument(
        "--out", metavar="DIR", help="output directory (default: evidence/<utc-time>-<scenario>/); must be new"
    )

    for scenario in SCENARIOS:  # each scenario's options, defined once, in its own module
        if scenario.options_title:
            add_arguments(run.add_argument_group(scenario.options_title).add_argument, scenario.options)
    run.add_argument(
        "--client-header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra header the streaming scenario's client sends, repeatable (default: none; never stored in evidence)",
    )
    run.add_argument(
        "--key",
        "--sign-key",
        metavar="PRIVATE.pem",
        help="Ed25519 private key to sign the provenance with (DSSE); `verify --key PUBLIC.pem` checks it "
        "(default: unsigned)",
    )
    run.add_argument(
        "--seed",
        type=_whole(0),
        default=0,
        metavar="N",
        help="seed of the replicas' latency jitter (default: %(default)s)",
    )
    run.add_argument("--allow-unsupported", action="store_true", help="checks the SUT declares unsupported pass")
    run.add_argument(
        "--parallel",
        type=_whole(1),
        default=2,
        metavar="N",
        help="parallel allocations for several scenarios (default: %(default)s)",
    )
    run.add_argument("--keep-cluster", action="store_true", help="leave the cluster running afterwards")
    drain = run.add_argument_group("drain scenario: the window and allowance (default: the SUT profile's)")
    add_arguments(drain.add_argument, DrainTiming)
    where = run.add_argument_group("where to run (default: a dockerized Slurm cluster on this machine)")
    add_arguments(where.add_argument, ClusterOptions)
    replicas = run.add_argument_group("replicas (default: synthetic vLLM stand-ins)")
    add_arguments(replicas.add_argument, BackendOptions)
    run.add_argument(
        "-k",
        "--check",
        action="append",
        default=None,
        metavar="PATTERN",
        help="judge only the checks PATTERN names: an id (drain.allowance), a glob (overload.total.*) or a dotted "
        "prefix (health.node_loss); only the scenarios and phases they need run; repeatable; `dd-accept checks` "
        "lists the ids (default: every check)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print every Slurm command and environment the chosen scenarios would submit; run nothing",
    )
    run.set_defaults(handler=_cmd_run)

    gate = commands.add_parser(
        "gate",
        help="run a release gate file: scenarios, thresholds, one SUT or a baseline and a candidate",
        description="Run what a gate file asks, judge its thresholds and (with two SUTs) compare them. "
        "Exit 0 the gate passes, 1 it does not, 2 the gate file or the machine is wrong.",
    )
    gate.add_argument("--config", required=True, metavar="GATE.toml", help="the gate file (see docs/gate.example.toml)")
    gate.add_argument(
        "--sut",
        action="append",
        default=[],
        metavar="SUT",
        help="replaces gate.suts: once for the candidate, twice for baseline then candidate (default: gate.suts)",
    )
    gate.add_argument(
        "--out", metavar="DIR", help="output directory (default: gate.out, else evidence/<utc-time>-gate-<name>/)"
    )
    gate.add_argument(
        "--key",
        "--sign-key",
        metavar="PRIVATE.pem",
        help="Ed25519 private key to sign each bundle's provenance with (default: gate.sign_key, else unsigned)",
    )
    gate.add_argument(
        "--check",
        dest="check_only",
        action="store_true",
        help="validate the gate file, its SUTs and key, say what it would run, and run nothing",
    )
    gate.set_defaults(handler=_cmd_gate)

    compare = commands.add_parser(
        "compare",
        help="what changed between a baseline bundle and a candidate bundle: verdicts, key numbers, serving metrics",
        description="Verify both bundles as `verify` does (a bundle that does not verify is refused, exit 2, "
        "unless --allow-unverified), then compare them check by check and serving metric by serving metric.",
    )
    compare.add_argument("baseline", metavar="BUNDLE_A", help="baseline bundle directory or .tar.gz")
    compare.add_argument("candidate", metavar="BUNDLE_B", help="candidate bundle directory or .tar.gz")
    compare.add_argument(
        "--format",
        choices=("table", "md", "html", "json"),
        default="table",
        help="table (plain lines in a pipe), md, html, or json: dd-accept/compare/v1 (default: %(default)s)",
    )
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a passing check now fails, or a capacity number (knee, proxy CPU per chunk) or a "
        "serving metric (TTFT, ITL, TPOT, E2EL, throughput, error rates) is worse than the baseline's beyond "
        "its tolerance",
    )
    compare.add_argument(
        "--tolerance",
        type=_below_one,
        default=None,
        metavar="FRACTION",
        help="how much worse a capacity number may get, as a fraction of the baseline's (default: each metric's "
        "own, from measured noise: "
        + ", ".join(f"{m.metric} {m.tolerance:g}" for m in REGRESSION_METRICS).replace("%", "%%")
        + ")",
    )
    compare.add_argument(
        "--serving-tolerance",
        type=_below_one,
        default=SERVING_TOLERANCE,
        metavar="FRACTION",
        help="how much worse a serving metric of a scenario or phase may get, as a fraction of the baseline's "
        "(default: %(default)g)",
    )
    add_reading_options(compare)
    compare.set_defaults(handler=_cmd_compare)

    trail = commands.add_parser(
        "history",
        help="each metric and verdict of many bundles over time, changes beyond a tolerance flagged",
        description="Follow every serving metric, check metric and verdict across bundles, oldest first; flag "
        "a value that moved in its worse direction by more than the tolerance, or a check that stopped passing. "
        "Each bundle is verified first, as `verify` does: one that does not is refused (exit 2) unless "
        "--allow-unverified, which marks it NOT verified on its row.",
    )
    trail.add_argument(
        "paths", nargs="+", metavar="BUNDLE_OR_DIR", help="bundles (directory or .tar.gz), or directories of them"
    )
    trail.add_argument(
        "--tolerance",
        type=_fraction,
        default=0.10,
        metavar="FRACTION",
        help="flag a change worse than this against the bundle before (default: %(default)g)",
    )
    trail.add_argument("--html", metavar="FILE.html", help="write one self-contained page of charts (default: none)")
    trail.add_argument("--csv", metavar="FILE.csv", help="write every value in long form (default: none)")
    trail.add_argument("--fail-on-change", action="store_true", help="exit 1 when a change is flagged")
    add_reading_options(trail)
    trail.set_defaults(handler=_cmd_history)

    add_checks_command(commands)

    audit = commands.add_parser("audit", help="scan files, directories and archives for secrets and host details")
    audit.add_argument("paths", nargs="+", metavar="PATH", help="files, directories, .tar.gz, .whl or .zip")
    audit.add_argument("--licences", action="store_true", help="also require a declared licence in wheels")
    audit.add_argument(
        "--baseline",
        metavar="FILE",
        help="accepted findings (file, rule, salted sha256 of the line) not to report; a changed line is found "
        "again (default: none)",
    )
    audit.add_argument(
        "--write-baseline",
        metavar="FILE",
        help="write every finding as a baseline to review, and exit 0 (default: audit, write nothing)",
    )
    audit.set_defaults(handler=_cmd_audit)

    sanitize = commands.add_parser(
        "sanitize", help="remove secrets and host details from logs you want to share (files, dirs, archives)"
    )
    sanitize.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or archives")
    sanitize.add_argument("--out", required=True, metavar="DIR", help="where the sanitized copies go (must be new)")
    sanitize.set_defaults(handler=_cmd_sanitize)

    verify = commands.add_parser("verify", help="check an evidence bundle's digests, provenance and audit")
    verify.add_argument("bundle", metavar="BUNDLE", help="bundle directory or .tar.gz")
    verify.add_argument(
        "--wheel",
        action="append",
        default=[],
        metavar="WHEEL.whl",
        help="a wheel to check against the provenance's subjects, repeatable (default: none)",
    )
    add_public_key(verify)
    verify.add_argument("--require-signature", action="store_true", help="fail unless a signature verifies with --key")
    policy = verify.add_argument_group("policy: exit 1 unless the evidence shows it")
    policy.add_argument("--require-pass", action="store_true", help="the run's verdict is pass")
    policy.add_argument(
        "--require-check",
        action="append",
        default=[],
        metavar="CHECK_ID",
        help="this check passed (repeatable; default: none)",
    )
    policy.add_argument(
        "--require-sut", metavar="NAME==VERSION", help="the judged wheels include this SUT (default: any)"
    )
    verify.set_defaults(handler=_cmd_verify)

    report = commands.add_parser(
        "report",
        help="re-render a bundle's report from the bundle alone, once it verified",
        description="Verify the bundle as `verify` does, then render it with a verified / NOT verified line "
        "at the top (md, html; on stderr for every format). A bundle that does not verify is refused (exit 2) "
        "unless --allow-unverified.",
    )
    report.add_argument("bundle", metavar="BUNDLE", help="bundle directory or .tar.gz")
    report.add_argument(
        "--format",
        choices=("html", "md", "junit", "json"),
        default="html",
        help="html (self-contained), md, junit (JUnit XML), or json: results.json, verified (default: %(default)s)",
    )
    add_reading_options(report)
    report.set_defaults(handler=_cmd_report)

    sut = commands.add_parser("sut", help="prepare the system under test (wheelhouse, digests, node image)")
    sut_actions = sut.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    sut.set_defaults(handler=lambda args, console: sut.print_help() or EXIT_USAGE)
    prepare = sut_actions.add_parser("prepare", help="fetch and digest the SUT's wheels and build its node image")
    add_sut_options(prepare)
    prepare.set_defaults(handler=_cmd_sut_prepare)

    prune = actions.add_parser("prune", help="remove every dd-accept container, network and volume")
    prune.add_argument("--images", action="store_true", help="also remove dd-accept images")
    prune.set_defaults(handler=_cmd_cluster_prune)
    _global_options_everywhere(parser)
    return parser


# Commands with a machine-readable result: `--json` prints it (its schema under docs/schema/).
JSON_COMMANDS = ("run", "verify", "audit", "compare", "gate", "doctor", "cluster status", "checks")
_NO_COLOR_HELP = "no colour, even on a terminal (as the NO_COLOR environment variable)"
_JSON_HELP = "print one JSON document on stdout (schema in docs/schema/); the human output goes to stderr"


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """`-q`, `--json` and `--no-color` mean the same on every command, so they are accepted after it too
    (`dd-accept run overload -q`). SUPPRESS keeps a command's parser from resetting what
    was given before the command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                command.add_argument(
                    "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress display"
                )
                command.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON_HELP)
                command.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS, help=_NO_COLOR_HELP)
                _global_options_everywhere(command)


def _command_name(args: argparse.Namespace) -> str:
    action = getattr(args, "action", None)
    return f"{args.subcommand} {action}" if action else str(args.subcommand)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr if args.json else sys.stdout)  # --json: stdout is for documents only
        return EXIT_USAGE
    command = _command_name(args)
    if args.json and (
        command not in JSON_COMMANDS or getattr(args, "dry_run", False) or getattr(args, "check_only", False)
    ):
        where = {"run": "--dry-run", "gate": "gate --check"}.get(command, f"`{command}`")
        parser.error(f"--json is not available for {where}; it is for: {', '.join(JSON_COMMANDS)}")
    _interrupt_on_term()
    console = ConsoleListener(quiet=args.quiet, no_color=args.no_color)
    stdout = sys.stdout
    try:
        # With --json, stdout carries the one document: everything a person reads goes to stderr.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            code = int(args.handler(args, console))
    except DDAcceptError as error:
        fail_line(str(error))
        code, console.document = error.exit_status, _error_document(command, error.exit_status, str(error))
    except KeyboardInterrupt:
        message = "interrupted; everything this command started has been removed"
        fail_line(message)
        code, console.document = EXIT_INTERRUPTED, _error_document(command, EXIT_INTERRUPTED, message)
    if args.json:
        if console.document is None or console.document.get("exit_status", code) != code:
            raise AssertionError(f"dd-accept {command} --json: no document, or one that disagrees with exit {code}")
        stdout.write(json.dumps(console.document, indent=2) + "\n")
        stdout.flush()
    return code


def _error_document(command: str, code: int, message: str) -> dict[str, Any]:
    return checked({"schema": "dd-accept/error/v1", "command": command, "exit_status": code, "error": message})


if __name__ == "__main__":
    raise SystemExit(main())
