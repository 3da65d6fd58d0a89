"""The plugin's options, and the run request they make, read once at configure time.

`dd-accept run` hands its pytest child the request it validated as one JSON document
(`--dd-request FILE`, `acceptance.request.RunRequest.from_json`); under plain pytest the
same request is built from the `--dd-*` options, which are derived from the option models
(each scenario's, found through the registry, and the run's own), so both paths reach the
fixtures as one `RunRequest`. Bad values are a `pytest.UsageError` before any container
starts. Nothing here imports docker or jinja2: the machinery is imported by the fixtures
that use it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dd_accept.acceptance.request import RUN_MODELS, RunRequest, scenario_options
from dd_accept.acceptance.scenarios import SCENARIO_MODELS
from dd_accept.base.errors import DDAcceptError
from dd_accept.base.options import add_arguments, build, flag, given
from dd_accept.base.user_files import read_user_text
from dd_accept.deployment.backends.vllm import vllm_backend
from dd_accept.slurm_docker.login_node import open_existing
from dd_accept.slurm_docker.spec import ClusterShape, ClusterSpec
from dd_accept.sut.spec import SutChoice

PREFIX = "--dd-"
RUN_ID = pytest.StashKey[str]()

# What a run request carries besides its option models: the pytest flag that sets it under
# plain pytest (refused beside --dd-request, which carries it already).
REQUEST_FLAGS = ("--dd-check",)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("dd-accept", "dd-accept Slurm cluster")
    add_arguments(group.addoption, ClusterShape, PREFIX)  # the session cluster's size
    group.addoption(
        "--dd-cluster",
        default=None,
        help="cluster name; an already running cluster of that name is reused and left running",
    )
    add_arguments(group.addoption, SutChoice, PREFIX)
    scenarios = parser.getgroup("dd-accept scenarios", "dd-accept acceptance scenario options")
    scenarios.addoption(
        "--dd-request",
        default=None,
        metavar="FILE",
        help="the run request `dd-accept run` validated (JSON); it carries every option below",
    )
    scenarios.addoption("--dd-out", default=None, help="write scenario results, progress and results.json here")
    scenarios.addoption(
        "--dd-check",
        action="append",
        default=None,
        metavar="PATTERN",
        help="judge only the checks PATTERN names (an id, a glob such as 'overload.total.*', or a dotted prefix), "
        "and run only the scenarios and phases they need; repeatable (default: every check)",
    )
    # Every scenario option and the run's own, derived from their one definition each.
    for model in (*SCENARIO_MODELS, *RUN_MODELS.values()):
        add_arguments(scenarios.addoption, model, PREFIX)


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """What the fixtures read, validated once; kept in `config.stash[SETTINGS]`."""

    request: RunRequest
    from_runner: bool  # the request came from `dd-accept run` (--dd-request): it names the scenarios
    cluster_spec: ClusterSpec
    existing: Any  # slurm_docker.login_node.ExistingCluster of --dd-cluster-mode existing; else None
    backend: Any  # deployment.backends.vllm.VllmBackend of --dd-backend vllm; None: synthetic replicas


SETTINGS = pytest.StashKey[PluginSettings]()


def read_settings(config: pytest.Config) -> PluginSettings:
    """The session's settings from its options; a bad value is a `pytest.UsageError`."""
    try:
        path = config.getoption("--dd-request")
        request = _from_file(config, Path(path)) if path else _from_options(config)
        return PluginSettings(
            request=request,
            from_runner=bool(path),
            cluster_spec=_cluster_spec(config, request),
            existing=_existing_cluster(request, bool(path)),
            backend=vllm_backend(request.backend),
        )
    except DDAcceptError as error:
        raise pytest.UsageError(str(error)) from None


def _from_file(config: pytest.Config, path: Path) -> RunRequest:
    """The runner's request; any option it carries given beside it is refused, never
    silently overridden by one or the other."""
    models = (*SCENARIO_MODELS, *RUN_MODELS.values(), SutChoice)
    also = [flag(f, PREFIX) for model in models for f in _given_fields(config, model)]
    also += [name for name in REQUEST_FLAGS if config.getoption(name) not in (None, [])]
    if also:
        raise pytest.UsageError(f"--dd-request carries the run's options; {also[0]} was given as well")
    text = read_user_text(path, "--dd-request")
    try:
        return RunRequest.from_json(text)
    except (DDAcceptError, ValueError, KeyError, TypeError) as error:
        raise pytest.UsageError(f"--dd-request {path.name}: not a run request ({error})") from None


def _given_fields(config: pytest.Config, model: type) -> list[Any]:
    values = given(model, lambda dest: config.getoption(dest), PREFIX)
    return [f for f in model.__dataclass_fields__.values() if f.name in values]


def _from_options(config: pytest.Config) -> RunRequest:
    """The request plain pytest's `--dd-*` options make (every scenario it collects runs)."""
    checks = config.getoption("--dd-check")
    target = _build(config, SutChoice)
    return RunRequest(
        scenario="all",
        sut=target.sut,
        profile=target.profile,
        options=scenario_options(lambda model: given(model, config.getoption, PREFIX), _pytest_flag),
        **{name: _build(config, model) for name, model in RUN_MODELS.items()},
        checks=tuple(checks) if checks else None,
    )


def _pytest_flag(option_field: Any) -> str:
    return flag(option_field, PREFIX)


def _build(config: pytest.Config, model: type) -> Any:
    """One option model from this session's `--dd-*` values, a bad value spelled as its flag."""
    try:
        return build(model, given(model, config.getoption, PREFIX), _pytest_flag)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def _existing_cluster(request: RunRequest, from_runner: bool) -> Any:
    """The login node's cluster when the request says `existing`, validated; else None."""
    if request.cluster.mode != "existing":
        return None
    # The runner's request is spelled in `run`'s flags; plain pytest's in `--dd-*` ones.
    return open_existing(request.cluster, flag if from_runner else _pytest_flag)


def _cluster_spec(config: pytest.Config, request: RunRequest) -> ClusterSpec:
    shape = _build(config, ClusterShape)
    return ClusterSpec(
        name=config.getoption("--dd-cluster") or _session_cluster_name(config),
        nodes=shape.nodes,
        cpus_per_node=shape.cpus_per_node,
        slurm=request.cluster.release,
        proctrack=request.cluster.proctrack,
    )


def _session_cluster_name(config: pytest.Config) -> str:
    """Same name in every xdist worker of one run, different across runs."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or config.stash.get(RUN_ID, None)
    if run_id is None:
        run_id = config.stash[RUN_ID] = hashlib.sha256(os.urandom(16)).hexdigest()
    return f"ddtest-{run_id[:10]}"
