"""`dd-accept run` and `dd-accept gate`: the commands that judge a SUT."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dd_accept.acceptance.request import RUN_MODELS, GeneralOptions, RunnerOptions, RunRequest, scenario_options
from dd_accept.acceptance.scenarios import SCENARIO_NAMES, SCENARIOS
from dd_accept.base.errors import EXIT_PASS
from dd_accept.base.options import (
    add_arguments,
    parse_argv_values,
)
from dd_accept.deployment.backends.vllm import BackendOptions
from dd_accept.harness.arguments import (
    add_sut_options,
    built_from_args,
)
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.dry_run import print_plan
from dd_accept.harness.gate import describe_gate, resolve_suts, run_gate
from dd_accept.harness.gate_file import load_gate
from dd_accept.harness.runner import default_out, run
from dd_accept.reports.signing import load_private_key
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.sut.profile import DrainTiming
from dd_accept.sut.spec import SutChoice


def _cmd_run(args: argparse.Namespace, console: ConsoleListener) -> int:
    run_models = {name: built_from_args(model, args) for name, model in RUN_MODELS.items()}
    target = built_from_args(SutChoice, args)
    request = RunRequest(
        scenario=args.scenario,
        sut=target.sut,
        profile=target.profile,
        out=Path(args.out) if args.out else None,
        options=scenario_options(lambda model: parse_argv_values(args, model)),
        **run_models,
        sign_key=Path(args.key) if args.key else None,
        parallel=built_from_args(RunnerOptions, args).parallel,
        checks=tuple(args.check) if args.check else None,
    )
    return print_plan(request) if args.dry_run else run(request, console)


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


def add_run_commands(commands: Any) -> None:
    """`run` (its options walk the scenario registry) and `gate`."""
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
    add_arguments(run.add_argument, GeneralOptions)
    run.add_argument(
        "--key",
        "--sign-key",
        metavar="PRIVATE.pem",
        help="Ed25519 private key to sign the provenance with (DSSE); `verify --key PUBLIC.pem` checks it "
        "(default: unsigned)",
    )
    add_arguments(run.add_argument, RunnerOptions)
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
