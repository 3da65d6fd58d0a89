"""Every user option is defined once, in its model (a scenario's in its own module, found
through the registry; the run's own in `acceptance.request.RUN_MODELS`); `dd-accept run`,
the pytest plugin, gate files and the request the runner hands its pytest child are derived
from it. These tests walk the registry, so an option added to a scenario's model is covered
with no edit here; they fail when a front end grows an option of its own, loses one, or
reads one back differently: each option of each model makes the round trip CLI → model,
pytest → model, gate file → model, and model → the runner's request → the plugin's model."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import pytest
from _pytest.config.argparsing import Parser

from dd_accept import plugin
from dd_accept.acceptance.overload import OverloadOptions
from dd_accept.acceptance.request import RUN_MODELS, GeneralOptions, RunnerOptions, RunRequest
from dd_accept.acceptance.scenarios import SCENARIO_MODELS, SCENARIOS
from dd_accept.base import options as opts
from dd_accept.deployment.backends.vllm import BackendOptions
from dd_accept.harness.cli import build_parser
from dd_accept.harness.gate_file import parse_gate
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.sut.profile import DrainTiming
from dd_accept.sut.spec import DEFAULT_SUT, SutChoice

# Every model users set options of: each scenario's (from the registry) and the run's own.
MODELS = tuple(m for m in (*SCENARIO_MODELS, *RUN_MODELS.values()) if opts.user_options(m))
SCENARIO_OF = {scenario.options: scenario.name for scenario in SCENARIOS}
# The gate-file section of each: a scenario's options go to [options].
GATE_SECTION = {DrainTiming: "thresholds", ClusterOptions: "cluster", BackendOptions: "backend"}


def _run_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["run"]


def _pytest_parser() -> Parser:
    parser = Parser(processopt=lambda option: None, _ispytest=True)
    plugin.pytest_addoption(parser)
    return parser


# Options a model refuses together with the others changed (the docker cluster's Slurm
# release against --cluster existing): they make their round trip in an instance of their own.
EXCLUSIVE = {ClusterOptions: ("slurm", "slurm_config")}


def _changed(model: type, only: tuple[str, ...] | None = None) -> Any:
    """An instance of `model` with every user option away from its default (so a lost option
    cannot hide behind its default); with `only`, just those options."""
    hints = opts._hints(model)
    values = {}
    for field in opts.user_options(model):
        wanted = field.name in only if only is not None else field.name not in EXCLUSIVE.get(model, ())
        if not wanted:
            continue
        kind, repeated = opts._scalar(hints[field.name])
        default, choices = opts.default_of(field), field.metadata["choices"]
        if repeated:
            values[field.name] = ("--a=1: x", "b: 2")  # a flag's shape, and a header's (NAME: VALUE)
        elif choices:
            values[field.name] = next(choice for choice in reversed(choices) if choice != default)
        elif kind is bool:
            values[field.name] = not default
        elif kind is int:
            values[field.name] = (default or 0) + 1
        elif kind is float:
            values[field.name] = (default or 7.0) + 0.5
        else:
            values[field.name] = "/x/y"
    return model(**values)


def _instances(model: type) -> list[Any]:
    exclusive = EXCLUSIVE.get(model, ())
    return [_changed(model), *([_changed(model, only=exclusive)] if exclusive else [])]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_option_reaches_the_model_from_the_cli(model):
    for instance in _instances(model):
        namespace = _run_parser().parse_args(["overload", *opts.to_argv(instance, "--")])
        assert opts.build(model, opts.parse_argv_values(namespace, model)) == instance


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_option_reaches_the_plugin_from_its_flags(model):
    for instance in _instances(model):
        namespace = _pytest_parser().parse(opts.to_argv(instance, "--dd-"))
        raw = opts.given(model, lambda dest, parsed=namespace: getattr(parsed, dest), "--dd-")
        assert opts.build(model, raw) == instance


def _request_with(model: type, instance: Any) -> RunRequest:
    if model in SCENARIO_OF:
        return RunRequest(SCENARIO_OF[model], "x==1", options={SCENARIO_OF[model]: instance})
    name = next(name for name, run_model in RUN_MODELS.items() if run_model is model)
    return RunRequest("overload", "x==1", **{name: instance})


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_option_reaches_the_pytest_child_through_the_runners_request(model):
    for instance in _instances(model):
        sent = _request_with(model, instance)
        assert RunRequest.from_json(sent.to_json()) == sent


def test_no_two_models_declare_the_same_flag_or_gate_key():
    """Each front end holds every model's options side by side (one parser, one [options]
    section): a flag two models declare would be one option setting both."""
    flags = [opts.flag(f) for model in MODELS for f in opts.user_options(model)]
    assert len(flags) == len(set(flags)), sorted(f for f in flags if flags.count(f) > 1)
    keys = [opts.gate_key(f) for model in SCENARIO_MODELS for f in opts.user_options(model)]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def _toml(value: Any) -> str:
    return json.dumps(list(value)) if isinstance(value, tuple) else json.dumps(value)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_option_reaches_the_model_from_a_gate_file(model):
    for instance in _instances(model):
        scenario = "drain" if model is DrainTiming else SCENARIO_OF.get(model, "overload")
        section = GATE_SECTION.get(model, "options")
        lines = [f'[gate]\nname = "g"\nscenarios = ["{scenario}"]', f"[{section}]"]
        in_gate = opts.gate_options(model)
        lines += [
            f"{opts.gate_key(f)} = {_toml(getattr(instance, f.name))}"
            for f in in_gate
            if getattr(instance, f.name) not in (None, ())
        ]
        gate = parse_gate("\n".join(lines) + "\n", "g.toml")
        run_models = {
            DrainTiming: gate.drain,
            ClusterOptions: gate.cluster_options,
            BackendOptions: gate.backend_options,
            GeneralOptions: gate.general,
        }
        built = run_models[model]() if model in run_models else gate.scenario_options()[scenario]
        # what a gate file may not set (a secret header, a terminal's switch) keeps its default
        expected = dataclasses.replace(instance, **{f.name: opts.default_of(f) for f in opts.user_options(model)
                                                    if f not in in_gate})  # fmt: skip
        assert built == expected


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_defaults_and_help_come_from_the_definition(model):
    run = {a.dest: a for a in _run_parser()._actions}
    for field in opts.user_options(model):
        action = run[field.name]
        assert action.help.startswith(field.metadata["help"])
        default = opts.default_of(field)
        if default not in (None, (), False):  # a switch is off unless given: no default shown
            assert f"(default: {default})" in action.help
    assert model() == opts.build(model, {})  # nothing given: the model's own defaults


def test_cross_field_rules_speak_each_front_ends_spelling():
    with pytest.raises(ValueError, match="--queue-depth must be above --threshold"):
        opts.build(OverloadOptions, {"queue_depth": "2", "threshold": "2"})
    with pytest.raises(ValueError, match="--dd-queue-depth must be above --dd-threshold"):
        opts.build(OverloadOptions, {"queue_depth": "2", "threshold": "2"}, lambda f: opts.flag(f, "--dd-"))
    with pytest.raises(ValueError, match="--dd-srun-arg applies to --dd-cluster-mode existing only"):
        opts.build(ClusterOptions, {"srun_args": ["x"]}, lambda f: opts.flag(f, "--dd-"))
    with pytest.raises(ValueError, match=r"options.queue_depth must be a whole number >= 1, got 'x'"):
        opts.build(OverloadOptions, {"queue_depth": "x"}, lambda f: f"options.{f.name}")


def test_bad_values_are_refused_with_the_bound():
    with pytest.raises(ValueError, match="--drain-window must be a number of seconds > 0, got '0'"):
        opts.build(DrainTiming, {"window_seconds": "0"})
    with pytest.raises(ValueError, match="--gpus-per-replica must be a whole number >= 0, got '-1'"):
        opts.build(BackendOptions, {"backend": "vllm", "model": "m", "gpus_per_replica": "-1"})
    with pytest.raises(ValueError, match="--replicas must be a whole number >= 1, got True"):
        opts.build(OverloadOptions, {"replicas": True})
    # upper bounds, said with the lower one, for a count and a number of seconds alike
    from dd_accept.acceptance.capacity import CapacityOptions

    with pytest.raises(ValueError, match="--load-levels must be a whole number from 2 to 30, got '31'"):
        opts.build(CapacityOptions, {"load_levels": "31"})
    with pytest.raises(ValueError, match="--level-seconds must be a number of seconds > 0 and at most 3600, got '4e3'"):
        opts.build(CapacityOptions, {"level_seconds": "4e3"})
    assert opts.build(CapacityOptions, {"level_seconds": "3600"}).level_seconds == 3600  # the bound itself is in


def test_the_models_cover_the_front_ends_and_nothing_else():
    """A flag the run parser or the plugin declares by hand for a model's concern is a second
    definition: every option-like flag of `run` is either from a model or a run-level flag."""
    front_models = (*MODELS, SutChoice, RunnerOptions)
    from_models = {opts.flag(f) for model in front_models for f in opts.user_options(model)}
    run_level = {"--out", "--key", "--sign-key"}
    run_level |= {"--dry-run", "--help", "-h", "--check", "-k"}
    run_level |= {"-q", "--quiet", "--json", "--no-color"}  # global: accepted after the command too
    declared = {s for a in _run_parser()._actions for s in a.option_strings}
    assert declared - from_models == run_level


READS_OPTIONS = """
def test_reads(scenario_inputs, replica_backend, request):
    assert scenario_inputs.options["overload"].queue_depth == 9 and scenario_inputs.options["overload"].replicas == 5
    assert replica_backend.model == "org/m" and replica_backend.gpus_per_replica == 1
"""


def test_the_plugin_parses_its_options_at_configure_time(pytester):
    """The real plugin in a child pytest: values given as `--dd-*` reach the fixtures, and a
    bad one is a usage error (exit 4) before any fixture runs."""
    pytester.makepyfile(test_reads=READS_OPTIONS)
    flags = ["-p", "no:cacheprovider", "--dd-queue-depth=9", "--dd-replicas=5"]
    result = pytester.runpytest_subprocess(*flags, "--dd-backend=vllm", "--dd-model=org/m")
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dd-queue-depth=deep")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dd-queue-depth must be a whole number >= 1, got 'deep'" in bad.stderr.str()
    vllm_only = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dd-model=org/m")
    assert "--dd-model applies to --dd-backend vllm only" in vllm_only.stderr.str()


READS_REQUEST = """
def test_reads(scenario_inputs, client_headers, scenario_seed):
    assert scenario_inputs.options["overload"].queue_depth == 9 and scenario_inputs.checks == ("overload.*",)
    assert client_headers == ("X-Key: s3cret",) and scenario_seed == 4
"""


def test_the_plugin_reads_the_runners_request_and_refuses_a_second_source(pytester):
    """The runner's request reaches the fixtures whole; an option given beside it, or a file
    that is not a request, is a usage error (exit 4), never one silently overriding the other."""
    request = RunRequest(
        "overload",
        "x==1",
        options={"overload": OverloadOptions(queue_depth=9)},
        general=GeneralOptions(seed=4, client_headers=("X-Key: s3cret",)),
        checks=("overload.*",),
    )
    path = pytester.path / "request.json"
    path.write_text(request.to_json())
    pytester.makepyfile(test_reads=READS_REQUEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-request={path}")
    result.assert_outcomes(passed=1)
    both = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-request={path}", "--dd-replicas=3")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dd-request carries the run's options; --dd-replicas was given as well" in both.stderr.str()
    sut_too = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-request={path}", "--dd-sut=y==1")
    assert "--dd-request carries the run's options; --dd-sut was given as well" in sut_too.stderr.str()
    path.write_text('{"kind": "something else"}')
    wrong = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-request={path}")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR and "not a run request" in wrong.stderr.str()


def test_the_cluster_shape_is_one_model_in_cluster_up_and_the_plugin():
    """`cluster up --nodes` and the session cluster's `--dd-nodes` are the same option: one
    model, read back alike, a bad value refused in each front end's spelling."""
    from dd_accept.slurm_docker.spec import MAX_NODES, ClusterShape

    parser = build_parser()
    shape = ClusterShape(nodes=3, cpus_per_node=8)
    cli = parser.parse_args(["cluster", "up", *opts.to_argv(shape, "--")])
    assert opts.build(ClusterShape, opts.parse_argv_values(cli, ClusterShape)) == shape
    namespace = _pytest_parser().parse(opts.to_argv(shape, "--dd-"))
    assert opts.build(ClusterShape, opts.given(ClusterShape, lambda dest: getattr(namespace, dest), "--dd-")) == shape
    with pytest.raises(ValueError, match=f"--nodes must be a whole number from 1 to {MAX_NODES}, got '65'"):
        opts.build(ClusterShape, {"nodes": "65"})


def test_the_sut_and_its_profile_are_one_model_in_run_sut_prepare_and_the_plugin():
    """`run --sut/--profile`, `sut prepare --sut/--profile` and plain pytest's
    `--dd-sut/--dd-profile` are the same two options: read back alike, the default SUT when
    none is given."""
    target = SutChoice(sut="x==2", profile="p.toml")
    parser = build_parser()
    for command in (["run", "overload"], ["sut", "prepare"]):
        namespace = parser.parse_args([*command, *opts.to_argv(target, "--")])
        assert opts.build(SutChoice, opts.parse_argv_values(namespace, SutChoice)) == target
        left_alone = parser.parse_args(command)
        assert opts.build(SutChoice, opts.parse_argv_values(left_alone, SutChoice)) == SutChoice(DEFAULT_SUT, None)
    namespace = _pytest_parser().parse(opts.to_argv(target, "--dd-"))
    assert opts.build(SutChoice, opts.given(SutChoice, lambda dest: getattr(namespace, dest), "--dd-")) == target


def test_the_runners_options_are_one_model_in_run_and_gate_files_and_not_the_plugins():
    """`run --parallel` and a gate file's `options.parallel` are one option, refused alike;
    plain pytest spreads its tests with its own `-n`, so the plugin declares no `--dd-parallel`."""
    runner = RunnerOptions(parallel=5)
    namespace = _run_parser().parse_args(["overload", *opts.to_argv(runner, "--")])
    assert opts.build(RunnerOptions, opts.parse_argv_values(namespace, RunnerOptions)) == runner
    gate = parse_gate('[gate]\nname = "g"\nscenarios = ["overload"]\n[options]\nparallel = 5\n', "g.toml")
    assert gate.runner() == runner
    assert parse_gate('[gate]\nname = "g"\nscenarios = ["overload"]\n', "g.toml").runner() == RunnerOptions()
    with pytest.raises(ValueError, match="--parallel must be a whole number >= 1, got '0'"):
        opts.build(RunnerOptions, {"parallel": "0"})
    pytest_flags = {name for option in _pytest_parser()._anonymous.options for name in option.names()}
    pytest_flags |= {name for group in _pytest_parser()._groups for o in group.options for name in o.names()}
    assert "--dd-parallel" not in pytest_flags and "--dd-sut" in pytest_flags


def test_a_switch_cannot_default_to_on():
    """A bool option is store_true: one on by default could never be turned off."""
    with pytest.raises(TypeError, match="a switch must default to False"):
        opts.option(True, "always on")
