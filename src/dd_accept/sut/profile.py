"""SUT profiles: one small declarative file per SUT family says how to drive it.

How to start the proxy (a command template), which ASGI middleware gives queue admission
(import path and environment), which adapter builds the real client path, how the SUT's
own cleanup stops endpoint steps, and which capabilities it lacks. Unknown keys and wrong
types are rejected with the file and key named, so a typo cannot silently change a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from dd_accept.base.errors import UsageError
from dd_accept.base.options import option, user_options
from dd_accept.base.toml_tables import build_table, parse_toml
from dd_accept.base.user_files import read_user_text


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    name: str
    distribution: str
    versions: str


@dataclass(frozen=True, slots=True)
class ProxyProfile:
    command: tuple[str, ...]
    retry_after_args: tuple[str, ...]
    per_host_args: tuple[str, ...]
    per_backend_args: tuple[str, ...]
    max_upstream_attempts: int
    metrics_path: str
    # Where the proxy's metrics count retries after an upstream 429 (a dotted path into the
    # JSON at metrics_path); "" when the SUT reports none: failover is then judged from the
    # replicas' side alone. The default is rc1's.
    retry_429_metric: str = "retries.http_429"
    # How many upstream connections the proxy holds at most (rc1: TCPConnector(limit=256)):
    # health.probe_isolation saturates exactly that many.
    upstream_connection_limit: int = 256
    # The upstream statuses the proxy retries on another attempt while it has attempts left
    # (rc1: _RETRYABLE_STATUS_CODES); telemetry.status_failover forces each of them.
    retried_statuses: tuple[int, ...] = (429, 500, 502, 503, 504)


@dataclass(frozen=True, slots=True)
class QueueAdmissionProfile:
    middleware: str
    threshold_env: str
    retry_after_env: str
    default_threshold: int
    # How old a queue reading the middleware still trusts (rc1: 1 s; it reads every 0.1 s).
    # A middleware may admit until it has a reading (fail-open); from a cold start it must
    # reject a queue held too deep within this bound. The default is rc1's.
    stale_after_seconds: float = 1.0
    # What the middleware lets through whatever the queue (rc1: backpressure._EXEMPT_PATHS):
    # probes and metadata, so a queue deep enough to reject inference never fails a health
    # check. overload.admission.exempt GETs each while the queue is held too deep.
    exempt_paths: tuple[str, ...] = ("/health", "/ready", "/metrics", "/version", "/v1/models", "/ping")

    def __post_init__(self) -> None:
        if any(not path.startswith("/") for path in self.exempt_paths):
            raise ValueError("queue_admission.exempt_paths: each is a URL path, starting with /")


@dataclass(frozen=True, slots=True)
class ClientProfile:
    adapter: str
    decrease_factor: float
    successes_until_increase: int
    cooldown_seconds: float  # the client's cooldown after a 429 that carries no Retry-After
    increase_step: int = 1  # how far the limit rises after successes_until_increase successes (rc1: +1)


@dataclass(frozen=True, slots=True)
class CleanupProfile:
    script: str
    register_function: str
    stop_function: str
    wait_function: str  # waits for the client, failing when a required step is gone
    # The status the wait function documents for a failed attempt (rc1: dd_require_running → 70).
    failure_status: int = 70
    # How the SUT's controller launches an endpoint step, where it has its own launch path: a
    # script to source (after `script`) and a function that starts every endpoint of the runtime
    # manifest named by `manifest_variable` and registers each (the manifest's shape is
    # `sut.runtime_manifest`'s). Empty: the drill starts the endpoint with srun and registers it
    # through `register_function` itself.
    launch_script: str = ""
    launch_function: str = ""
    manifest_variable: str = ""

    def __post_init__(self) -> None:
        declared = [bool(self.launch_script), bool(self.launch_function), bool(self.manifest_variable)]
        if any(declared) and not all(declared):
            raise ValueError("cleanup.launch_script, launch_function and manifest_variable are declared together")


@dataclass(frozen=True, slots=True)
class DrainProfile:
    window_seconds: float  # how long an endpoint may drain in-flight streams after TERM
    allowance_seconds: float  # when the controller forces what is left (KILL)


@dataclass(frozen=True, slots=True)
class DrainTiming:
    """The SUT profile's drain timing, replaced for one run (None: the profile's own)."""

    window_seconds: float | None = option(
        None,
        "seconds; replaces the SUT profile's drain window (default: the profile's)",
        above=0,
        flag="drain-window",
        gate_key="drain_window_s",
    )
    allowance_seconds: float | None = option(
        None,
        "seconds; replaces the SUT profile's drain allowance (default: the profile's)",
        above=0,
        flag="drain-allowance",
        gate_key="drain_allowance_s",
    )

    def __post_init__(self) -> None:
        window, allowance = self.window_seconds, self.allowance_seconds
        if window is not None and allowance is not None and allowance < window:
            raise ValueError("--drain-allowance must be at least --drain-window")

    def overrides(self) -> dict[str, float]:
        """The profile fields to replace, by their names in the profile's [drain] table."""
        return {f.name: getattr(self, f.name) for f in user_options(DrainTiming) if getattr(self, f.name) is not None}

    def applied_to(self, profile: SutProfile) -> SutProfile:
        """`profile` with the drain timing replaced where this run replaces it."""
        overrides = self.overrides()
        return replace(profile, drain=replace(profile.drain, **overrides)) if overrides else profile


@dataclass(frozen=True, slots=True)
class CapacityProfile:
    """What the capacity scenario holds the proxy to on dd-accept's reference machine (2 cores):
    the knee's floor in output tokens/s and the most CPU per forwarded chunk. Both are the
    SUT's measured numbers less their spread (docs/benchmarks.md); a run or gate may set its own."""

    knee_floor: float = 2000.0
    max_proxy_cpu_us_per_chunk: float = 150.0


# What a SUT can claim to report about its routing, connections and timeouts (the seed pull
# request's telemetry theme); each is one telemetry.* check.
TELEMETRY_CLAIMS = (
    "request_log",
    "attempt_log",
    "attempt_counters",
    "incomplete_streams",
    "connection_lifecycle",
    "timeouts",
    "probe_routing",
)


@dataclass(frozen=True, slots=True)
class TelemetryProfile:
    """What the SUT claims to report, and where: the telemetry checks compare it with what
    the replicas and the client saw. A check of something not claimed is `unsupported`,
    never `pass`. The names are rc1's (proxy.py: `_ProxyMetrics.snapshot`, `_record_final`)
    where rc1 has them; where it has none, the names a release that adds them is read by."""

    claims: tuple[str, ...] = ()
    # One log record per request: this marker, then a JSON object, on the proxy's output.
    log_marker: str = "slurm_proxy_request"
    # A record of an incomplete stream: this field true, and the bytes sent downstream.
    incomplete_field: str = "incomplete"
    bytes_field: str = "bytes_sent"
    # Dotted paths into the JSON at proxy.metrics_path.
    requests_metric: str = "requests"
    attempts_metric: str = "attempts"
    retries_metric: str = "retries"  # {reason: count}; a retry after status S is "http_S"
    final_statuses_metric: str = "final_statuses"  # {status: count}
    backends_metric: str = "backends"  # [{index, requests}], in --backend order
    connection_counters: tuple[str, ...] = ("connections.expired", "connections.stale", "connections.discarded")
    # The pool's counts streaming.connection_accounting reads: connections opened and
    # reused (counters) and idle in the pool now (a gauge).
    connections_opened_metric: str = "connections.opened"
    connections_reused_metric: str = "connections.reused"
    connections_idle_metric: str = "connections.idle"
    timeout_counters: tuple[str, ...] = ("timeouts.terminal", "timeouts.streaming")
    # The proxy's own settings the lifecycle and timeout phases are built from: how long an
    # idle upstream connection lives, how long it waits for an attempt's first byte and for
    # the next bytes of a stream. A run drives a phase only where the wait it needs is at
    # most telemetry_checks.LONGEST_WAIT_SECONDS; beyond that the counter is not judged.
    keepalive_seconds: float | None = None
    terminal_timeout_seconds: float | None = None
    streaming_timeout_seconds: float | None = None
    # What the client gets when every attempt of its request timed out before the first byte
    # (the status the SUT documents for it); None: reported, not judged.
    timeout_status: int | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.claims) - set(TELEMETRY_CLAIMS))
        if unknown:
            raise ValueError(f"telemetry.claims: unknown {', '.join(unknown)} (known: {', '.join(TELEMETRY_CLAIMS)})")

    def within_streaming_timeout(self, seconds: float) -> float:
        """`seconds`, or half the proxy's declared streaming timeout where that is shorter: a
        proxy may end a stream silent for longer than it says, so a scenario that keeps a
        stream silent on purpose keeps it within that."""
        timeout = self.streaming_timeout_seconds
        return seconds if timeout is None else min(seconds, timeout / 2)

    def claimed(self, claim: str) -> bool:
        return claim in self.claims


NODE_LOSS_OUTCOMES = ("fail", "recover")


@dataclass(frozen=True, slots=True)
class Capabilities:
    # A runtime health monitor (the seed pull request) fails an attempt whose backend stops
    # serving; with one declared, the attempt must also fail within `monitor_detect_seconds`.
    health_monitor: bool
    monitor_detect_seconds: float = 15.0
    # What the controller does with an attempt whose replicas' node dies mid-generation:
    # "fail" it with cleanup.failure_status (a required replica is gone), or "recover" and
    # finish every record anyway. Declared, never guessed: health.node_loss.attempt_failed
    # judges the SUT against it.
    node_loss: str = "fail"

    def __post_init__(self) -> None:
        if self.node_loss not in NODE_LOSS_OUTCOMES:
            raise ValueError(
                f"capabilities.node_loss must be one of {', '.join(NODE_LOSS_OUTCOMES)}, got {self.node_loss!r}"
            )


@dataclass(frozen=True, slots=True)
class SutProfile:
    profile: ProfileInfo
    proxy: ProxyProfile
    queue_admission: QueueAdmissionProfile
    client: ClientProfile
    cleanup: CleanupProfile
    drain: DrainProfile
    capabilities: Capabilities
    capacity: CapacityProfile = field(default_factory=CapacityProfile)
    telemetry: TelemetryProfile = field(default_factory=TelemetryProfile)

    @property
    def name(self) -> str:
        return self.profile.name

    def matches(self, distribution: str, version: str) -> bool:
        return canonicalize_name(distribution) == canonicalize_name(self.profile.distribution) and (
            version in SpecifierSet(self.profile.versions, prereleases=True)
        )

    def proxy_argv(
        self,
        *,
        python: str,
        site_packages: str,
        port: int,
        backends: list[tuple[str, int]],
        retry_after: int | None,
    ) -> list[str]:
        """The proxy command for these backends, rendered from the template."""
        common = {"python": python, "site_packages": site_packages, "port": str(port)}
        argv = [part.format(**common) for part in self.proxy.command]
        if retry_after is not None:
            argv += [part.format(retry_after=retry_after) for part in self.proxy.retry_after_args]
        for host in dict.fromkeys(host for host, _ in backends):
            argv += [part.format(host=host) for part in self.proxy.per_host_args]
        for host, backend_port in backends:
            argv += [part.format(host=host, port=backend_port) for part in self.proxy.per_backend_args]
        return argv


def parse_profile(text: str, source: str) -> SutProfile:
    profile = build_table(SutProfile, parse_toml(text, "profile", source), "", "profile", source)
    try:
        SpecifierSet(profile.profile.versions)
    except InvalidSpecifier:
        raise UsageError(f"profile {source}: profile.versions is not a version range") from None
    return profile


def builtin_profiles() -> list[SutProfile]:
    folder = resources.files("dd_accept.sut").joinpath("profiles")
    return [
        parse_profile(entry.read_text(), entry.name)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    ]


def load_profile(path: Path) -> SutProfile:
    return parse_profile(read_user_text(path, "--profile"), path.name)


class NamedWheel(Protocol):
    """What a profile is chosen by: a wheel's file, canonical distribution name and version."""

    @property
    def file(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


W = TypeVar("W", bound=NamedWheel)


@dataclass(frozen=True, slots=True)
class ProfileChoice(Generic[W]):
    """The profile that drives a SUT and the wheel it follows (the runtime the profile names)."""

    profile: SutProfile
    wheel: W | None  # None: a --profile naming none of the SUT's wheels
    builtin: bool

    def describe(self) -> str:
        if self.builtin:
            return f"profile {self.profile.name}, chosen by {self.wheel.file}"
        return f"profile {self.profile.name} from --profile" + (f", for {self.wheel.file}" if self.wheel else "")


def choose_profile(wheels: Sequence[W], given: SutProfile | None = None, sut: str = "") -> ProfileChoice[W]:
    """The profile for a SUT of these wheels: `given` (--profile), else the built-in profile
    that one of them matches. A SUT may be several wheels (the runtime beside its engine):
    the profile follows the wheel it names, whichever file comes first. A usage error naming
    the fix when no wheel has a built-in profile."""
    if given is not None:
        ranked = [w for w in wheels if given.matches(w.name, w.version)]
        ranked += [w for w in wheels if canonicalize_name(w.name) == canonicalize_name(given.profile.distribution)]
        return ProfileChoice(given, ranked[0] if ranked else None, builtin=False)
    profiles = builtin_profiles()
    for profile in profiles:
        for wheel in wheels:
            if profile.matches(wheel.name, wheel.version):
                return ProfileChoice(profile, wheel, builtin=True)
    known = ", ".join(f"{p.profile.distribution} {p.profile.versions}" for p in profiles)
    found = ", ".join(f"{w.name} {w.version}" for w in wheels)
    if len(wheels) == 1:
        raise UsageError(f"no built-in profile for {found} (built in: {known}); pass --profile FILE")
    raise UsageError(
        f"no built-in profile for any wheel of --sut {sut}: {found} (built in: {known}); pass --profile FILE"
    )


def profile_for(distribution: str, version: str) -> SutProfile:
    """The built-in profile for a SUT distribution and version, or a usage error naming the fix."""
    wheel = _Named(f"{distribution}-{version}", distribution, version)
    return choose_profile([wheel]).profile


@dataclass(frozen=True, slots=True)
class _Named:
    file: str
    name: str
    version: str
