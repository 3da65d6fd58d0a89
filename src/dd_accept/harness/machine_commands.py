"""`dd-accept doctor`, `cluster ...` and `sut prepare`: the machine, its dockerized Slurm
clusters and the node images, apart from any scenario.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from dd_accept.base.errors import EXIT_PASS, EXIT_TIMED_OUT, EXIT_USAGE, UsageError
from dd_accept.base.options import (
    add_arguments,
)
from dd_accept.base.state import state_root
from dd_accept.harness.arguments import (
    CommandParser,
    add_sut_options,
    built_from_args,
    positive_seconds,
)
from dd_accept.harness.console import ConsoleListener, fail_line
from dd_accept.harness.doctor import run_checks
from dd_accept.harness.doctor import to_json as doctor_document
from dd_accept.harness.runner import parse_sut
from dd_accept.slurm_docker import engine, images
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.slurm_docker.spec import ClusterShape, ClusterSpec
from dd_accept.slurm_docker.sut_image import build_node_image
from dd_accept.slurm_docker.sweep import list_clusters
from dd_accept.sut.profile import choose_profile, load_profile
from dd_accept.sut.spec import SutChoice
from dd_accept.sut.wheelhouse import build_wheelhouse

DEFAULT_CLUSTER = "dd-accept"


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

    options, shape = _cluster_options(args), built_from_args(ClusterShape, args)
    spec = ClusterSpec(
        name=args.name,
        nodes=shape.nodes,
        cpus_per_node=shape.cpus_per_node,
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
    return int(record.exit_code or 0) if not record.timed_out else EXIT_TIMED_OUT


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

    target = built_from_args(SutChoice, args)
    spec = parse_sut(target.sut, target.profile)
    profile = load_profile(Path(target.profile)) if target.profile else None
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


def _add_cluster_options(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """Some of `run`'s cluster options (their one definition), for a `cluster` action."""
    add_arguments(parser.add_argument, ClusterOptions, only=names)


def _cluster_options(args: argparse.Namespace) -> ClusterOptions:
    return built_from_args(ClusterOptions, args)


def add_machine_commands(commands: Any) -> None:
    """`doctor`, the `cluster` group and the `sut` group."""
    doctor = commands.add_parser("doctor", help="check the machine and print the fix for each problem")
    doctor.set_defaults(handler=_cmd_doctor)

    cluster = commands.add_parser("cluster", help="build, start, inspect and remove the dockerized Slurm cluster")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    cluster.set_defaults(handler=lambda args, console: cluster.print_help() or EXIT_USAGE)

    build = actions.add_parser("build", help="build the node images from Debian packages (no registry)")
    _add_cluster_options(build, ("slurm",))
    build.set_defaults(handler=_cmd_cluster_build)

    up = actions.add_parser("up", help="start a controller and N compute nodes; returns when all are idle")
    up.add_argument("--name", default=DEFAULT_CLUSTER, metavar="NAME", help="cluster name (default: %(default)s)")
    add_arguments(up.add_argument, ClusterShape)
    up.add_argument("--subnet", metavar="CIDR", help="IPv4 subnet for the internal network (default: chosen by Docker)")
    up.add_argument(
        "--ready-timeout",
        type=positive_seconds,
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
        "--timeout",
        type=positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="stop waiting after (default: %(default)g)",
    )
    execute.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    execute.set_defaults(handler=_cmd_cluster_exec)

    prune = actions.add_parser("prune", help="remove every dd-accept container, network and volume")
    prune.add_argument("--images", action="store_true", help="also remove dd-accept images")
    prune.set_defaults(handler=_cmd_cluster_prune)

    sut = commands.add_parser("sut", help="prepare the system under test (wheelhouse, digests, node image)")
    sut_actions = sut.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    sut.set_defaults(handler=lambda args, console: sut.print_help() or EXIT_USAGE)
    prepare = sut_actions.add_parser("prepare", help="fetch and digest the SUT's wheels and build its node image")
    add_sut_options(prepare)
    prepare.set_defaults(handler=_cmd_sut_prepare)
