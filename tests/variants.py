"""Deliberately broken variants of real SUT wheels: the negative controls of every check.

A fault is a small textual edit of one released file, chosen as the regression a real
change would most likely bring. Each edit must match exactly once, so a fault can never
silently stop applying when the SUT changes. The variant wheel gets a local version
(`+ddfault.<name>`) and a rewritten RECORD, so it installs like any wheel.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.sut.profile import SutProfile

PROXY = "data_designer/slurm/runtime/proxy.py"
CONTROLLER = "data_designer/engine/models/request_admission/controller.py"
ADMISSION_CONFIG = "data_designer/engine/models/request_admission/config.py"
EXECUTOR = "data_designer/engine/models/clients/model_request_executor.py"
CLEANUP = "data_designer/slurm/runtime/cleanup.sh"
STEP_RUNNER = "data_designer/slurm/runtime/step_runner.sh"
BACKPRESSURE = "data_designer/slurm/runtime/backpressure.py"
_REJECT_RULE = "snapshot.depth is not None and not stale and snapshot.depth > self.settings.max_waiting_requests"


def _on_term(action: str) -> tuple[tuple[str, str, str], ...]:
    """Edits that make the proxy react to SIGTERM with `action` instead of aiohttp's drain."""
    return (
        (PROXY, "import socket\n", "import os\nimport signal\nimport socket\n"),
        (
            PROXY,
            "        application.on_startup.append(self._start)\n",
            "        application.on_startup.append(self._start)\n        application.on_startup.append(_on_term)\n",
        ),
        (
            PROXY,
            "async def _discard_response(response: ClientResponse) -> None:",
            "async def _on_term(application: web.Application) -> None:\n"
            "    loop = asyncio.get_running_loop()\n"
            f"    loop.add_signal_handler(signal.SIGTERM, {action})\n\n\n"
            "async def _discard_response(response: ClientResponse) -> None:",
        ),
    )


# The seed pull request's fix, applied to rc1's cleanup: TERM each endpoint *task* through
# scancel with its recorded step identity, give it the drain allowance, then KILL what is left.
_STEP_AWARE_CLEANUP = (
    (
        CLEANUP,
        "dd_cleanup_steps() {\n",
        "dd_signal_endpoint() {\n"
        "    local step\n"
        '    step=$(cat "${DD_STEP_IDENTITY_DIR:-/nonexistent}/$1" 2>/dev/null) || { kill -TERM "$1"; return; }\n'
        '    scancel --signal=TERM "${step}"\n'
        "}\n\n"
        "dd_wait_managed() {\n"
        "    local deadline=$((SECONDS + $1)) pid alive\n"
        "    while ((SECONDS < deadline)); do\n"
        "        alive=0\n"
        '        for pid in "${DD_MANAGED_PIDS[@]}"; do kill -0 "${pid}" 2>/dev/null && alive=1; done\n'
        "        ((alive)) || return 0\n"
        "        sleep 0.1\n"
        "    done\n"
        "}\n\n"
        "dd_cleanup_steps() {\n",
    ),
    (
        CLEANUP,
        '        kill -0 "${pid}" 2>/dev/null && kill -TERM "${pid}" 2>/dev/null || true\n    done\n    dd_sleep 0.2\n',
        '        kill -0 "${pid}" 2>/dev/null && dd_signal_endpoint "${pid}" || true\n'
        "    done\n    dd_wait_managed 12\n",
    ),
)


def _step_aware_edit(old: str, new: str) -> tuple[str, str, str]:
    """The step-aware cleanup's first edit, with `old` in what it inserts replaced by `new`."""
    return (CLEANUP, _STEP_AWARE_CLEANUP[0][1], _STEP_AWARE_CLEANUP[0][2].replace(old, new))


# The seed's fix as its pull request words it, the identity recorded by the launch path: "each
# endpoint task records its Slurm job/step identity before executing the proxy, and cleanup
# validates that identity against the current allocation before sending scancel --signal=TERM
# to that exact step". dd_start_step runs each step's command behind a line that writes the
# task's JOB.STEP beside its output; the cleanup looks it up by launcher, checks the step is
# one of this job's, TERMs it, keeps everything alive the 12 s allowance, then forces the rest.
# Nothing of dd-accept's drill is read: it passes only where the endpoint is launched through
# the SUT's own launch path.
_LAUNCH_RECORDED_CLEANUP = (
    (
        STEP_RUNNER,
        "dd_validate_environment_name() {\n",
        "declare -gA DD_STEP_IDENTITY_FILES=()\n\ndd_validate_environment_name() {\n",
    ),
    (
        STEP_RUNNER,
        '        exec "${DD_SRUN_COMMAND[@]}" -- "${DD_STEP_COMMAND[@]}"\n'
        '    ) >"${DD_STEP_STDOUT}" 2>"${DD_STEP_STDERR}" &\n'
        "    DD_LAST_PID=$!\n",
        '        exec "${DD_SRUN_COMMAND[@]}" -- bash -c '
        '\'printf "%s.%s\\n" "${SLURM_JOB_ID}" "${SLURM_STEP_ID}" >"$0" && exec "$@"\' \\\n'
        '            "${DD_STEP_STDOUT}.step" "${DD_STEP_COMMAND[@]}"\n'
        '    ) >"${DD_STEP_STDOUT}" 2>"${DD_STEP_STDERR}" &\n'
        "    DD_LAST_PID=$!\n"
        '    DD_STEP_IDENTITY_FILES[${DD_LAST_PID}]="${DD_STEP_STDOUT}.step"\n',
    ),
    _step_aware_edit(
        '    step=$(cat "${DD_STEP_IDENTITY_DIR:-/nonexistent}/$1" 2>/dev/null) || { kill -TERM "$1"; return; }\n',
        "    local file=${DD_STEP_IDENTITY_FILES[$1]:-}\n"
        '    step=$(cat "${file:-/nonexistent}" 2>/dev/null) || { kill -TERM "$1"; return; }\n'
        '    squeue -h -s -j "${SLURM_JOB_ID}" -o %i | grep -qxF "${step}" || { kill -TERM "$1"; return; }\n',
    ),
    _STEP_AWARE_CLEANUP[1],
)


# The step-aware cleanup made not to hold its controller up: it TERMs each endpoint's step and
# returns at once, leaving the allowance and the force to a background subshell. Every stream
# still completes where the controller waits on nothing else (as in dd-accept's drill), but in
# production the controller goes on and its job ends while the endpoint drains: "keep launchers
# and backends alive for the drain window" is the stop function's to keep.
_DETACHED_CLEANUP = (
    _STEP_AWARE_CLEANUP[0],
    (
        CLEANUP,
        '        kill -0 "${pid}" 2>/dev/null && kill -TERM "${pid}" 2>/dev/null || true\n'
        "    done\n"
        "    dd_sleep 0.2\n"
        "    for ((position = ${#indices[@]} - 1; position >= 0; position--)); do\n"
        "        index=${indices[position]}\n"
        "        pid=${DD_MANAGED_PIDS[index]}\n"
        '        kill -0 "${pid}" 2>/dev/null && kill -KILL "${pid}" 2>/dev/null || true\n'
        "    done\n"
        "    for ((position = ${#indices[@]} - 1; position >= 0; position--)); do\n"
        "        index=${indices[position]}\n"
        '        wait "${DD_MANAGED_PIDS[index]}" 2>/dev/null || true\n'
        "    done\n",
        '        kill -0 "${pid}" 2>/dev/null && dd_signal_endpoint "${pid}" || true\n'
        "    done\n"
        "    (\n"
        "        dd_wait_managed 12\n"
        '        for pid in "${DD_MANAGED_PIDS[@]}"; do kill -0 "${pid}" 2>/dev/null && kill -KILL "${pid}"; done\n'
        "    ) </dev/null >/dev/null 2>&1 &\n",
    ),
)


# The step-aware cleanup with too short an allowance: it TERMs each endpoint's step as the
# seed's fix does, but forces (KILLs the step) after 5 s, not the seed's 12 s: streams with more
# than 5 s left are cut ("force remaining endpoints to stop only after the 12-second allowance").
_HASTY_CLEANUP = (
    _step_aware_edit(
        "dd_cleanup_steps() {\n",
        "dd_kill_endpoint() {\n"
        "    local step\n"
        '    step=$(cat "${DD_STEP_IDENTITY_DIR:-/nonexistent}/$1" 2>/dev/null) || return 0\n'
        '    scancel --signal=KILL "${step}"\n'
        "}\n\n"
        "dd_cleanup_steps() {\n",
    ),
    (
        CLEANUP,
        _STEP_AWARE_CLEANUP[1][1],
        '        kill -0 "${pid}" 2>/dev/null && dd_signal_endpoint "${pid}" || true\n'
        "    done\n    dd_wait_managed 5\n"
        '    for pid in "${DD_MANAGED_PIDS[@]}"; do kill -0 "${pid}" 2>/dev/null && dd_kill_endpoint "${pid}"; done\n',
    ),
)


# The step-aware cleanup with no bound on its wait: it TERMs each endpoint's step and waits for
# its launcher to end, however long, so an endpoint that does not bound its own drain (rc1's
# proxy, fact 3) is never forced ("bounded escalation", the seed's regression coverage names).
_UNBOUNDED_CLEANUP = (
    _STEP_AWARE_CLEANUP[0],
    (
        CLEANUP,
        _STEP_AWARE_CLEANUP[1][1],
        _STEP_AWARE_CLEANUP[1][2].replace("dd_wait_managed 12", "dd_wait_managed 86400"),
    ),
)


# A health-watching wait, as the seed pull request's monitor behaves: while the client runs,
# every required backend's process must live *and* its /health must answer 200 (the URLs
# come from DD_REQUIRED_HEALTH_URLS, which dd-accept's drill sets); otherwise the attempt
# fails with the documented 70.
# rc1's wait loop (cleanup.sh, dd_wait_for_client): each child's end, then its required steps.
_RC1_WAIT_LOOP = (
    "        wait -n || status=$?\n"
    '        if ! kill -0 "${client_pid}" 2>/dev/null; then\n'
    '            return "${status}"\n'
    "        fi\n"
    "        dd_require_running || return 70\n"
)

_HEALTH_WATCHING_WAIT = (
    (
        CLEANUP,
        '        kill -0 "${pid}" 2>/dev/null || return 1\n    done\n}\n',
        '        kill -0 "${pid}" 2>/dev/null || return 1\n'
        "    done\n"
        "    local url\n"
        "    for url in ${DD_REQUIRED_HEALTH_URLS:-}; do\n"
        "        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \\\n"
        '            "${url}" >/dev/null 2>&1 || return 1\n'
        "    done\n"
        "}\n",
    ),
    (
        CLEANUP,
        _RC1_WAIT_LOOP,
        "        dd_require_running || return 70\n        sleep 0.5\n",
    ),
)

# rc1's wait also watching the job's nodes in Slurm, polled as health-watching-wait polls: a
# node whose State carries DRAIN is taken for a lost one (an administrator's maintenance ahead
# ends the attempt). Slurm unreachable is no verdict.
_SLURM_NODE_WATCHING_WAIT = (
    (
        CLEANUP,
        '        kill -0 "${pid}" 2>/dev/null || return 1\n    done\n}\n',
        '        kill -0 "${pid}" 2>/dev/null || return 1\n'
        "    done\n"
        "    local nodes\n"
        '    nodes=$(squeue -h -j "${SLURM_JOB_ID:-0}" -o %N 2>/dev/null) || return 0\n'
        '    if [[ -n ${nodes} ]] && scontrol -o show node "${nodes}" 2>/dev/null | grep -q "State=[^ ]*DRAIN"; then\n'
        "        return 1\n"
        "    fi\n"
        "}\n",
    ),
    _HEALTH_WATCHING_WAIT[1],
)

# rc1's wait also asking Slurm, polled as health-watching-wait polls, whether its job still
# runs, each query bounded at 2 s (a wait must not hang on Slurm): no answer in time is taken
# for a job that is gone. While Slurm's controller restarts, nothing answers.
_SLURM_JOB_WATCHING_WAIT = (
    (
        CLEANUP,
        '        kill -0 "${pid}" 2>/dev/null || return 1\n    done\n}\n',
        '        kill -0 "${pid}" 2>/dev/null || return 1\n'
        "    done\n"
        "    [[ -z ${SLURM_JOB_ID:-} ]] \\\n"
        '        || [[ $(timeout 2 squeue -h -j "${SLURM_JOB_ID}" -o %T 2>/dev/null) == RUNNING ]]\n'
        "}\n",
    ),
    _HEALTH_WATCHING_WAIT[1],
)

# rc1's wait taking a required step that exited 0 for one that finished its work, not for a
# lost one: only a step that failed (its srun's status, kept from `wait -n`) fails the attempt.
# A backend stopped by Slurm's TERM (a preemption) exits 0, so its loss goes unnoticed; one
# killed still fails the attempt.
_CLEAN_EXIT_IS_DONE_WAIT = (
    (CLEANUP, "    local client_pid=$1\n", "    local client_pid=$1 ended pid\n    local -A ended_with=()\n"),
    (
        CLEANUP,
        _RC1_WAIT_LOOP,
        "        status=0 ended=\n"
        "        wait -n -p ended || status=$?\n"
        '        if ! kill -0 "${client_pid}" 2>/dev/null; then\n'
        '            return "${status}"\n'
        "        fi\n"
        "        [[ -z ${ended:-} ]] || ended_with[${ended}]=${status}\n"
        '        for pid in "${DD_REQUIRED_PIDS[@]+"${DD_REQUIRED_PIDS[@]}"}"; do\n'
        '            kill -0 "${pid}" 2>/dev/null && continue\n'
        "            if [[ -z ${ended_with[${pid}]+set} ]]; then\n"
        '                wait "${pid}" 2>/dev/null && ended_with[${pid}]=0 || ended_with[${pid}]=$?\n'
        "            fi\n"
        "            ((ended_with[${pid}] == 0)) || return 70\n"
        "        done\n",
    ),
)

# The same watch asking each backend without a timeout: a backend that answers 503 fails the
# attempt; one that hangs (accepts, answers nothing) holds the wait for ever.
_HEALTH_WAIT_WITHOUT_TIMEOUT = (
    (
        *_HEALTH_WATCHING_WAIT[0][:2],
        _HEALTH_WATCHING_WAIT[0][2].replace("urlopen(sys.argv[1], timeout=2)", "urlopen(sys.argv[1])"),
    ),
    _HEALTH_WATCHING_WAIT[1],
)


# The seed's "enable these events in production", applied to rc1: its proxy logs each request
# at INFO (`_record_final`) but configures no handler, so Python drops the records; each
# stream that breaks mid-way is logged as incomplete with the bytes sent downstream; and
# the counters the seed names are kept: expired, stale and discarded upstream connections
# (the three narrow aiohttp connector hooks it describes) and terminal and streaming
# timeouts. Its upstream keep-alive is 3 s and its read timeout 1 s (rc1: 65 s and 3600 s,
# the second of which no run can wait out), stated in its profile (`Fault.telemetry_profile`).
_COUNTING_CONNECTOR = """class _CountingConnector(TCPConnector):
    \"\"\"Eviction accounting: aiohttp has no trace signal for a connection it closes.\"\"\"

    def __init__(self, *args: object, metrics: _ProxyMetrics, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._dd_metrics = metrics

    def _evicted(self, proto: object, connected: bool) -> None:
        if connected:
            self._dd_metrics.connection_expired += 1
        else:
            self._dd_metrics.connection_stale += 1

    def _cleanup(self) -> None:
        before = [(proto, proto.is_connected()) for conns in self._conns.values() for proto, _ in conns]
        super()._cleanup()
        kept = {id(proto) for conns in self._conns.values() for proto, _ in conns}
        for proto, connected in before:
            if id(proto) not in kept:
                self._evicted(proto, connected)

    async def _get(self, key, traces):
        conns = self._conns.get(key)
        now = time.monotonic()
        while conns:
            proto, used = conns[0]
            alive = proto.is_connected()
            if alive and now - used <= self._keepalive_timeout:
                break
            conns.popleft()
            proto.close()
            self._evicted(proto, alive)
        if conns is not None and not conns:
            del self._conns[key]
            return None
        return await super()._get(key, traces)

    def _release(self, key, protocol, *, should_close: bool = False) -> None:
        if not self._closed and (self._force_close or should_close or protocol.should_close):
            self._dd_metrics.connection_discarded += 1
        super()._release(key, protocol, should_close=should_close)


"""
_ATTEMPT_RECORD = (
    '                _LOGGER.info("slurm_proxy_request %s", json.dumps({{"backend": index, "status": {}}}))\n'
)
# A drain bounded by the endpoint itself that logs what it ends: on TERM, aiohttp's graceful
# shutdown; just before the 10 s window, each request still in flight is cancelled (its stream
# is then logged as incomplete, with the bytes sent); at the window, exit 0 whatever is left.
_LOGGED_DRAIN = """_IN_FLIGHT = weakref.WeakSet()


def _drain_then_end_streams() -> None:
    asyncio.get_running_loop().call_later(9.5, _end_streams)
    timer = threading.Timer(10.0, os._exit, (0,))
    timer.daemon = True
    timer.start()
    raise web.GracefulExit()


def _end_streams() -> None:
    for task in list(_IN_FLIGHT):
        task.cancel()


"""
_TELEMETRY_LOGGED = (
    # streams still running at the drain window ended by the endpoint, and so logged
    (PROXY, "import time\n", "import threading\nimport time\nimport weakref\n"),
    *_on_term("_drain_then_end_streams"),
    (PROXY, "def _filter_request_headers(", _LOGGED_DRAIN + "def _filter_request_headers("),
    (
        PROXY,
        "    async def _forward(self, request: web.Request) -> web.StreamResponse:\n",
        "    async def _forward(self, request: web.Request) -> web.StreamResponse:\n"
        "        _IN_FLIGHT.add(asyncio.current_task())\n",
    ),
    # health probes leave least-connections alone: not counted as requests in flight
    (
        PROXY,
        "        session = self._require_session()\n        self.pool.acquire_index(index)\n",
        "        session = self._require_session()\n",
    ),
    (
        PROXY,
        "            return False\n        finally:\n            self.pool.release(index)\n",
        "            return False\n",
    ),
    # each attempted upstream logged (the seed's "log each attempted upstream"): its backend
    # index and the status it answered, or why it failed
    (
        PROXY,
        "                outcomes.append(reason)\n",
        "                outcomes.append(reason)\n" + _ATTEMPT_RECORD.format("reason"),
    ),
    (
        PROXY,
        "            outcomes.append(str(response.status))\n",
        "            outcomes.append(str(response.status))\n" + _ATTEMPT_RECORD.format("response.status")[4:],
    ),
    (
        PROXY,
        "    proxy = _ProxyApplication(backends, parsed.retry_after_seconds, health_path=parsed.health_path)\n",
        '    logging.basicConfig(level=logging.INFO, format="%(message)s")\n'
        "    proxy = _ProxyApplication(backends, parsed.retry_after_seconds, health_path=parsed.health_path)\n",
    ),
    (
        PROXY,
        '        if request.method != "HEAD":\n'
        "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
        "                await downstream.write(chunk)\n"
        "        await downstream.write_eof()\n",
        "        sent = 0\n"
        "        try:\n"
        '            if request.method != "HEAD":\n'
        "                async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
        "                    await downstream.write(chunk)\n"
        "                    sent += len(chunk)\n"
        "        except BaseException as error:\n"
        "            if isinstance(error, asyncio.TimeoutError):\n"
        '                self.metrics.timeouts["streaming"] += 1\n'
        '            record = {"incomplete": True, "bytes_sent": sent, "final_status": response.status}\n'
        '            _LOGGER.info("slurm_proxy_request %s", json.dumps(record, sort_keys=True))\n'
        "            raise\n"
        "        await downstream.write_eof()\n",
    ),
    (
        PROXY,
        "        self.connection_failed = 0\n",
        "        self.connection_failed = 0\n"
        "        self.connection_expired = 0\n"
        "        self.connection_stale = 0\n"
        "        self.connection_discarded = 0\n"
        "        self.timeouts: Counter[str] = Counter()\n",
    ),
    (
        PROXY,
        '                "idle": idle_connections,\n',
        '                "idle": idle_connections,\n'
        '                "expired": self.connection_expired,\n'
        '                "stale": self.connection_stale,\n'
        '                "discarded": self.connection_discarded,\n',
    ),
    (
        PROXY,
        '            "retries": dict(sorted(self.retries.items())),\n',
        '            "retries": dict(sorted(self.retries.items())),\n'
        '            "timeouts": {"terminal": self.timeouts["terminal"], "streaming": self.timeouts["streaming"]},\n',
    ),
    (PROXY, "class _ProxyApplication:\n", _COUNTING_CONNECTOR + "class _ProxyApplication:\n"),
    (
        PROXY,
        "        self.connector = TCPConnector(\n"
        "            limit=_MAXIMUM_CONNECTIONS,\n"
        "            limit_per_host=per_backend_limit,\n"
        "            keepalive_timeout=_KEEPALIVE_TIMEOUT_SECONDS,\n",
        "        self.connector = _CountingConnector(\n"
        "            metrics=self.metrics,\n"
        "            limit=_MAXIMUM_CONNECTIONS,\n"
        "            limit_per_host=per_backend_limit,\n"
        "            keepalive_timeout=3.0,\n",
    ),
    (PROXY, "                sock_read=_READ_TIMEOUT_SECONDS,\n", "                sock_read=1.0,\n"),
    (  # a terminal timeout: the attempt that timed out had no retry after it (earlier ones are retries)
        PROXY,
        "                    continue\n                if overload_seen:\n",
        "                    continue\n"
        '                if reason == "timeout":\n'
        '                    self.metrics.timeouts["terminal"] += 1\n'
        "                if overload_seen:\n",
    ),
)


def _structured_logging(formatter: str) -> tuple[tuple[str, str, str], ...]:
    """Edits that make the proxy's log handler write each line through `formatter`'s class body
    instead of the bare message: what a production logging setup does (JSON lines, logfmt)."""
    return (
        (
            PROXY,
            "def main(arguments:",
            f"class _StructuredLines(logging.Formatter):\n{formatter}\n\ndef main(arguments:",
        ),
        (
            PROXY,
            '    logging.basicConfig(level=logging.INFO, format="%(message)s")\n',
            "    _handler = logging.StreamHandler()\n"
            "    _handler.setFormatter(_StructuredLines())\n"
            "    logging.basicConfig(level=logging.INFO, handlers=[_handler])\n",
        ),
    )


# python-json-logger's shape: each record one JSON object, the logged text (with the request's
# record inside it, escaped) its "message"
_JSON_LINES = _structured_logging(
    "    def format(self, record):\n"
    '        return json.dumps({"time": self.formatTime(record), "level": record.levelname,'
    ' "logger": record.name, "message": record.getMessage()})\n'
)
# logfmt: key=value pairs, the logged text quoted with its quotes and backslashes escaped
_LOGFMT = _structured_logging(
    "    def format(self, record):\n"
    "        return f'level={record.levelname.lower()} logger={record.name} msg={json.dumps(record.getMessage())}'\n"
)


# What telemetry-logged's profile says differently: its keep-alive and read timeout.
_TELEMETRY_LOGGED_PROFILE = (
    ("keepalive_seconds", 3.0),
    ("terminal_timeout_seconds", 1.0),
    ("streaming_timeout_seconds", 1.0),
)


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    distribution: str  # the wheel the fault lives in
    regression: str  # what real change this models
    edits: tuple[tuple[str, str, str], ...]  # (file, exact text, replacement)
    # For a positive control ("not a fault"): the rc1 findings it fixes, which it must pass.
    fixes: frozenset[str] = frozenset()
    # Settings the variant changes that the SUT profile states ([telemetry] keys and values).
    telemetry_profile: tuple[tuple[str, float], ...] = ()

    def profile(self, base: SutProfile) -> SutProfile:
        """The SUT profile that describes this variant: `base` with what the variant changed."""
        if not self.telemetry_profile:
            return base
        return dataclasses.replace(base, telemetry=dataclasses.replace(base.telemetry, **dict(self.telemetry_profile)))


# Correct variants: rc1 changed in ways no contract rules out (routing, pacing, timing), each
# judged as rc1 is (`fixes` empty): a check one of them fails blames a correct release.
_POOL_INIT = "        self._active = [0] * len(backends)\n        self._cursor = 0\n"
_NO_BACKEND = '            raise LookupError("no backend remains")\n'
_RETRIED_STATUS_RELEASE = (
    "                await _discard_response(response)\n                self.pool.release(index)\n"
)
_CONNECTION_ERROR_RELEASE = "                outcomes.append(reason)\n                self.pool.release(index)\n"


def _sets_aside(when: str, seconds: str, *, on_connection_error: bool) -> tuple[tuple[str, str, str], ...]:
    """The proxy sets a backend aside for `seconds` (an expression) after an attempt answered
    with a status it retried and for which `when` holds (and, if asked, after a connection
    error), trying every backend again where all are set aside (a panic threshold)."""
    edits = [
        (
            PROXY,
            _POOL_INIT,
            _POOL_INIT + "        self._aside_until = [0.0] * len(backends)\n\n"
            "    def set_aside(self, index: int, seconds: float) -> None:\n"
            "        self._aside_until[index] = time.monotonic() + seconds\n",
        ),
        (
            PROXY,
            _NO_BACKEND,
            _NO_BACKEND + "        fresh = tuple(i for i in available if self._aside_until[i] <= time.monotonic())\n"
            "        available = fresh or available\n",
        ),
        (
            PROXY,
            _RETRIED_STATUS_RELEASE,
            _RETRIED_STATUS_RELEASE
            + f"                if {when}:\n                    self.pool.set_aside(index, {seconds})\n",
        ),
    ]
    if on_connection_error:
        edits.append(
            (
                PROXY,
                _CONNECTION_ERROR_RELEASE,
                _CONNECTION_ERROR_RELEASE + f"                self.pool.set_aside(index, {seconds})\n",
            )
        )
    return tuple(edits)


# rc1's least-connections tie-break (a cursor that turns past each pick)
_TIE_BREAK = (
    "        index = next(\n            candidate\n            for offset in range(len(self.backends))\n"
    "            if (candidate := (self._cursor + offset) % len(self.backends)) in candidates\n        )\n"
)
_HEALTH_PROBES = (
    "        results = await asyncio.gather(\n"
    "            *(self._probe_backend(index, backend) for index, backend in enumerate(self.pool.backends))\n"
    "        )\n"
)


# What the released rc1 fails, for true reasons (docs/checks.md, "What it finds"): the expected
# verdicts of the false-alarm benchmark and of the login-node comparison.
# rc1's telemetry findings: the seed's records and counters it does not emit (telemetry-logged fixes them all).
_TELEMETRY_FINDINGS = frozenset(
    {
        "telemetry.request_log",
        "telemetry.attempt_log",
        "telemetry.incomplete_streams",
        "telemetry.connection_lifecycle",
        "telemetry.timeouts",
        "telemetry.probe_routing",
    }
)
RC1_FAILS = (
    frozenset(
        {
            "drain.allowance",
            "drain.sut_cleanup.completion",
            "drain.sut_cleanup.failure",
            "drain.sut_cleanup.cancel",
            "drain.sut_escalation",
            "health.unresponsive.attempt_failed",
            "health.probe_isolation",
        }
    )
    | _TELEMETRY_FINDINGS
)
# rc1's loop that forwards a streamed body (the wire faults edit it)
_LOOP = (
    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
    "                await downstream.write(chunk)\n"
)
# rc1's loop with what a broken upstream body raises caught (the handler is written after it)
_GUARDED_LOOP = (
    "            try:\n"
    "                async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
    "                    await downstream.write(chunk)\n"
    "            except (ClientError, ConnectionError):\n"
)
_SUT_CLEANUP = frozenset(
    {"drain.sut_cleanup.completion", "drain.sut_cleanup.failure", "drain.sut_cleanup.cancel", "drain.sut_escalation"}
)


FAULTS = {
    fault.name: fault
    for fault in (
        Fault(
            "admission-never-rejects",
            "data-designer-slurm",
            "the queue admission middleware no longer rejects, whatever the queue depth",
            ((BACKPRESSURE, f"reject = {_REJECT_RULE}", "reject = False"),),
        ),
        Fault(
            "admission-slow-first-reading",
            "data-designer-slurm",
            "the queue sampler takes its first reading 3 s after it starts (not at once, then every 0.1 s): "
            "from a cold start the middleware fails open for 3 s",
            (
                (
                    BACKPRESSURE,
                    "    def _sample_forever(self) -> None:\n        while True:\n",
                    "    def _sample_forever(self) -> None:\n        time.sleep(3.0)\n        while True:\n",
                ),
            ),
        ),
        Fault(
            "admission-gates-probes",
            "data-designer-slurm",
            "the queue admission middleware exempts no path: /health, /metrics and /v1/models get its 429 too",
            (
                (
                    BACKPRESSURE,
                    '_EXEMPT_PATHS = ("/health", "/ready", "/metrics", "/version", "/v1/models", "/ping")',
                    "_EXEMPT_PATHS = ()",
                ),
            ),
        ),
        Fault(
            "overload-forgotten",
            "data-designer-slurm",
            "the proxy forgets the overload it saw: a request whose last attempt meets a connection error gets "
            "502 (backend unavailable), though a replica answered an earlier attempt 429",
            (
                (
                    PROXY,
                    "                if overload_seen:\n                    headers = {}\n",
                    "                if False:\n                    headers = {}\n",
                ),
            ),
        ),
        Fault(
            "no-5xx-failover",
            "data-designer-slurm",
            "the proxy retries 429 and 503 only: a 500, 502 or 504 from a backend reaches the client",
            (
                (
                    PROXY,
                    "_RETRYABLE_STATUS_CODES = frozenset({429, 500, 502, 503, 504})",
                    "_RETRYABLE_STATUS_CODES = frozenset({429, 503})",
                ),
            ),
        ),
        Fault(
            "passive-ejection",
            "data-designer-slurm",
            "not a fault: the proxy sets a backend aside for 10 s after a connection error or a 5xx it "
            "retried, trying every backend again where all are set aside (passive ejection, as nginx's "
            "max_fails=1 fail_timeout=10s or Envoy's outlier detection); rc1 otherwise",
            _sets_aside("response.status >= 500", "10.0", on_connection_error=True),
        ),
        Fault(
            "retry-after-aside",
            "data-designer-slurm",
            "not a fault: the proxy sets a backend that answered 429 aside for its Retry-After, trying every "
            "backend again where all are set aside",
            _sets_aside(
                "response.status == 429", "float(response.headers.get('Retry-After', '1'))", on_connection_error=False
            ),
        ),
        Fault(
            "lowest-index-tie-break",
            "data-designer-slurm",
            "not a fault: least-connections breaking a tie for the lowest backend index, not in turn",
            ((PROXY, _TIE_BREAK, "        index = min(candidates)\n"),),
        ),
        Fault(
            "random-tie-break",
            "data-designer-slurm",
            "not a fault: least-connections breaking a tie at random",
            (
                (PROXY, _TIE_BREAK, "        index = random.choice(sorted(candidates))\n"),
                (PROXY, "import socket\nimport time\n", "import random\nimport socket\nimport time\n"),
            ),
        ),
        Fault(
            "forwards-each-read",
            "data-designer-slurm",
            "not a fault: the proxy forwards each read of the upstream body as it comes (iter_any), not in "
            "chunks of up to 64 KiB",
            ((PROXY, "iter_chunked(_STREAM_CHUNK_BYTES)", "iter_any()"),),
        ),
        Fault(
            "largest-retry-after",
            "data-designer-slurm",
            "not a fault: the proxy's 429 carries the largest Retry-After its attempts were answered with, not "
            "the last",
            (
                (
                    PROXY,
                    "                    overload_retry_after = "
                    'response.headers.get("Retry-After", overload_retry_after)\n',
                    '                    seen = response.headers.get("Retry-After")\n'
                    "                    if seen is not None and (overload_retry_after is None or "
                    "int(seen) > int(overload_retry_after)):\n"
                    "                        overload_retry_after = seen\n",
                ),
            ),
        ),
        Fault(
            "sse-comment-first",
            "data-designer-slurm",
            "not a fault: the proxy opens each event stream with an SSE comment line (': proxied'), which "
            "every SSE client skips",
            (
                (
                    PROXY,
                    '        await downstream.prepare(request)\n        if request.method != "HEAD":\n',
                    "        await downstream.prepare(request)\n"
                    '        if response.content_type == "text/event-stream":\n'
                    '            await downstream.write(b": proxied\\n\\n")\n'
                    '        if request.method != "HEAD":\n',
                ),
            ),
        ),
        Fault(
            "sampler-50ms",
            "data-designer-slurm",
            "not a fault: the queue admission middleware reads the queue depth every 0.05 s, not 0.1 s",
            ((BACKPRESSURE, "    poll_interval_seconds: float = 0.1\n", "    poll_interval_seconds: float = 0.05\n"),),
        ),
        Fault(
            "health-cached-1s",
            "data-designer-slurm",
            "not a fault: the proxy's /health answers from its backends' probes of the last second",
            (
                (
                    PROXY,
                    _HEALTH_PROBES,
                    "        cached = getattr(self, '_health_cache', None)\n"
                    "        if cached is not None and time.monotonic() - cached[0] < 1.0:\n"
                    "            results = cached[1]\n"
                    "        else:\n"
                    + _HEALTH_PROBES.replace("        ", "            ")
                    + "            self._health_cache = (time.monotonic(), results)\n",
                ),
            ),
        ),
        Fault(
            "admission-at-threshold",
            "data-designer-slurm",
            "the queue admission middleware rejects at the threshold instead of above it (>= for >)",
            ((BACKPRESSURE, _REJECT_RULE, _REJECT_RULE.replace(" > ", " >= ")),),
        ),
        Fault(
            "retry-after-substituted",
            "data-designer-slurm",
            "the proxy replaces the replicas' Retry-After with its own configured value",
            (
                (
                    PROXY,
                    "if response.status == 429 and not has_retry_after and self.pool.retry_after_seconds",
                    "if response.status == 429 and self.pool.retry_after_seconds",
                ),
                (
                    PROXY,
                    "        headers = _filter_response_headers(response.headers)\n",
                    "        headers = _filter_response_headers(response.headers)\n"
                    '        headers = {k: v for k, v in headers.items() if k.casefold() != "retry-after"}\n',
                ),
            ),
        ),
        Fault(
            "endpoint-exits-at-start",
            "data-designer-slurm",
            "the proxy exits with status 3 before it serves (a start-up regression)",
            ((PROXY, "    proxy = _ProxyApplication(", "    raise SystemExit(3)\n    proxy = _ProxyApplication("),),
        ),
        Fault(
            "no-failover",
            "data-designer-slurm",
            "the proxy stops treating 429 as retryable, so overload is never failed over",
            (
                (
                    PROXY,
                    "_RETRYABLE_STATUS_CODES = frozenset({429, 500, 502, 503, 504})",
                    "_RETRYABLE_STATUS_CODES = frozenset({500, 502, 503, 504})",
                ),
            ),
        ),
        Fault(
            "five-attempts",
            "data-designer-slurm",
            "the upstream attempt limit is raised from 3 to 5",
            ((PROXY, "_MAXIMUM_UPSTREAM_ATTEMPTS = 3", "_MAXIMUM_UPSTREAM_ATTEMPTS = 5"),),
        ),
        Fault(
            "no-connection-retry",
            "data-designer-slurm",
            "a connection error (refused, reset) or a timeout ends the request with 502 instead of being "
            "retried on another backend: the failover a status code never drives",
            (
                (
                    PROXY,
                    "                if attempt + 1 < attempt_limit:\n"
                    "                    self.metrics.retries[reason] += 1\n"
                    "                    continue\n",
                    "",
                ),
            ),
        ),
        Fault(
            "retried-status-leaks",
            "data-designer-slurm",
            "an attempt answered with a status it retries elsewhere (429, 5xx) is never released from the "
            "least-connections count: the replicas that refused requests get less than their share ever after",
            (
                (
                    PROXY,
                    "                await _discard_response(response)\n                self.pool.release(index)\n",
                    "                await _discard_response(response)\n",
                ),
            ),
        ),
        Fault(
            "connection-error-leaks",
            "data-designer-slurm",
            "an attempt that met a connection error (refused, reset) or a timeout is never released from the "
            "least-connections count",
            (
                (
                    PROXY,
                    "                outcomes.append(reason)\n                self.pool.release(index)\n",
                    "                outcomes.append(reason)\n",
                ),
            ),
        ),
        Fault(
            "hangup-leaks",
            "data-designer-slurm",
            "a streamed response is released from the least-connections count only when it ended well: a client "
            "that leaves mid-stream (the proxy's write to it fails) leaves its replica counted busy for good",
            (
                (
                    PROXY,
                    "            self._record_final(final_response.status, outcomes, started_at)\n"
                    "            return result\n"
                    "        finally:\n"
                    "            final_response.release()\n"
                    "            self.pool.release(final_index)\n",
                    "            self._record_final(final_response.status, outcomes, started_at)\n"
                    "            self.pool.release(final_index)\n"
                    "            return result\n"
                    "        finally:\n"
                    "            final_response.release()\n",
                ),
            ),
        ),
        Fault(
            "cancel-leaks",
            "data-designer-slurm",
            "an attempt is released when the backend call raises an error, but not when the handler is cancelled "
            "(its client left while the proxy waited for the backend's answer: asyncio.CancelledError is no "
            "Exception): every client that gives up before its first byte leaves a replica counted busy",
            (
                (
                    PROXY,
                    "            except BaseException:\n                self.pool.release(index)\n",
                    "            except Exception:\n                self.pool.release(index)\n",
                ),
            ),
        ),
        Fault(
            "retry-after-lost",
            "data-designer-slurm",
            "Retry-After is treated as a hop-by-hop header and no longer restored",
            (
                (PROXY, '        "proxy-authenticate",\n', '        "proxy-authenticate",\n        "retry-after",\n'),
                (
                    PROXY,
                    "if response.status == 429 and not has_retry_after and self.pool.retry_after_seconds",
                    "if False and not has_retry_after and self.pool.retry_after_seconds",
                ),
            ),
        ),
        Fault(
            "429-as-503",
            "data-designer-slurm",
            "the proxy passes upstream overload on as 503 instead of 429",
            (
                (
                    PROXY,
                    "downstream = web.StreamResponse(status=response.status,",
                    "downstream = web.StreamResponse(status=503 if response.status == 429 else response.status,",
                ),
            ),
        ),
        Fault(
            "exit-on-term",
            "data-designer-slurm",
            "the endpoint exits at once on SIGTERM instead of draining in-flight streams",
            _on_term("os._exit, 143"),
        ),
        Fault(
            "drain-6s",
            "data-designer-slurm",
            "the endpoint ends its drain cleanly after 6 s, well inside the 10 s window",
            _on_term("loop.call_later, 6.0, os._exit, 0"),
        ),
        Fault(
            "drain-overruns-window",
            "data-designer-slurm",
            "the endpoint ends its drain 11.5 s after TERM: inside the 12 s allowance, so nothing forces it, "
            "but 1.5 s past its own 10 s window (a bound set from the allowance, not the window)",
            _on_term("loop.call_later, 11.5, os._exit, 0"),
        ),
        Fault(
            "done-at-term",
            "data-designer-slurm",
            "on TERM the endpoint ends every stream in flight with [DONE] and exits 0 (a 'graceful' stop): each "
            "client reads a shortened answer as a whole one",
            (
                *_on_term("_done_at_term"),
                (
                    PROXY,
                    "        await downstream.prepare(request)\n",
                    "        await downstream.prepare(request)\n        _OPEN_STREAMS.add(downstream)\n",
                ),
                (
                    PROXY,
                    "def _filter_request_headers(",
                    "_OPEN_STREAMS: set = set()\n\n\n"
                    "async def _finish_every_stream() -> None:\n"
                    "    for downstream in list(_OPEN_STREAMS):\n"
                    "        try:\n"
                    '            await downstream.write(b"data: [DONE]\\n\\n")\n'
                    "            await downstream.write_eof()\n"
                    "        except Exception:\n"
                    "            pass\n"
                    "    await asyncio.sleep(0.5)\n"
                    "    os._exit(0)\n\n\n"
                    "def _done_at_term() -> None:\n"
                    "    asyncio.ensure_future(_finish_every_stream())\n\n\n"
                    "def _filter_request_headers(",
                ),
            ),
        ),
        Fault(
            "drain-bounded",
            "data-designer-slurm",
            "not a fault: on TERM the endpoint drains, ends what is still streaming at its 10 s window and "
            "exits 0 by itself (the positive control of drain.allowance)",
            fixes=frozenset({"drain.allowance"}),
            edits=(
                (PROXY, "import time\n", "import threading\nimport time\n"),
                *_on_term("_bounded_drain"),
                (
                    PROXY,
                    "def _filter_request_headers(",
                    "def _bounded_drain() -> None:\n"
                    "    timer = threading.Timer(10.0, os._exit, (0,))\n"
                    "    timer.daemon = True\n"
                    "    timer.start()\n"
                    "    raise web.GracefulExit()\n\n\n"
                    "def _filter_request_headers(",
                ),
            ),
        ),
        Fault(
            "step-aware-cleanup",
            "data-designer-slurm",
            "not a fault: rc1's cleanup with the seed pull request's fix (the positive control of drain.sut_cleanup)",
            _STEP_AWARE_CLEANUP,
            fixes=_SUT_CLEANUP,
        ),
        Fault(
            "launch-recorded-cleanup",
            "data-designer-slurm",
            "not a fault: the seed pull request's fix with each endpoint's identity recorded by the SUT's own launch "
            "path (dd_start_step) and validated against the job's steps before its TERM (a positive control of "
            "drain.sut_cleanup that reads nothing of dd-accept's drill)",
            _LAUNCH_RECORDED_CLEANUP,
            fixes=_SUT_CLEANUP,
        ),
        Fault(
            "detached-cleanup",
            "data-designer-slurm",
            "the seed pull request's step-aware cleanup, but returning at once after each TERM, the allowance and "
            "the force left to a background subshell (so the controller is not held up): the job ends under a "
            "drain still running",
            _DETACHED_CLEANUP,
        ),
        Fault(
            "unbounded-cleanup",
            "data-designer-slurm",
            "the seed pull request's step-aware cleanup, but waiting for its endpoints without a bound: an endpoint "
            "that does not end by itself is never forced at the 12 s allowance",
            _UNBOUNDED_CLEANUP,
        ),
        Fault(
            "hasty-cleanup",
            "data-designer-slurm",
            "the seed pull request's step-aware cleanup, but forcing the endpoint (KILL to its step) 5 s after "
            "TERM, not after the 12 s allowance",
            _HASTY_CLEANUP,
        ),
        Fault(
            "health-always-ok",
            "data-designer-slurm",
            "the proxy's /health stops looking at its probes' results",
            ((PROXY, "status = 200 if all(results) else 503", "status = 200"),),
        ),
        Fault(
            "require-running-ignored",
            "data-designer-slurm",
            "the controller's check that required steps still run no longer fails",
            ((CLEANUP, 'kill -0 "${pid}" 2>/dev/null || return 1', 'kill -0 "${pid}" 2>/dev/null || true'),),
        ),
        Fault(
            "health-watching-wait",
            "data-designer-slurm",
            "not a fault: rc1's wait function also watches each required backend's /health while the client "
            "runs, as the seed pull request's monitor does "
            "(the positive control of health.unresponsive.attempt_failed)",
            _HEALTH_WATCHING_WAIT,
            fixes=frozenset({"health.unresponsive.attempt_failed"}),
        ),
        Fault(
            "drained-node-is-lost",
            "data-designer-slurm",
            "rc1's wait also watches the job's nodes in Slurm and takes one set DRAIN (an administrator's "
            "maintenance ahead, its steps still running) for a lost node: the attempt fails with 70",
            _SLURM_NODE_WATCHING_WAIT,
        ),
        Fault(
            "controller-silence-is-loss",
            "data-designer-slurm",
            "rc1's wait also asks Slurm whether its job still runs (squeue, bounded at 2 s) and takes no answer "
            "for a job that is gone: while Slurm's controller restarts, the attempt fails with 70",
            _SLURM_JOB_WATCHING_WAIT,
        ),
        Fault(
            "clean-exit-is-done",
            "data-designer-slurm",
            "rc1's wait takes a required step that exited 0 for one that finished its work: only a failed one "
            "fails the attempt, so backends that stop cleanly on Slurm's TERM (a preemption) are never taken for lost",
            _CLEAN_EXIT_IS_DONE_WAIT,
        ),
        Fault(
            "health-wait-without-timeout",
            "data-designer-slurm",
            "rc1's wait watches each required backend's /health as health-watching-wait does, but asks without "
            "a timeout: a backend answering 503 fails the attempt, one that hangs holds the wait for ever",
            _HEALTH_WAIT_WITHOUT_TIMEOUT,
        ),
        Fault(
            "probe-capacity",
            "data-designer-slurm",
            "not a fault: rc1 with health probes on their own connection pool, the seed pull request's fix "
            "(the positive control of health.probe_isolation)",
            (
                (
                    PROXY,
                    "        session = self._require_session()\n        self.pool.acquire_index(index)\n",
                    '        session = self.__dict__.get("_probe_session") or self.__dict__.setdefault(\n'
                    '            "_probe_session",\n'
                    "            ClientSession(connector=TCPConnector(limit=2 * len(self.pool.backends))),\n"
                    "        )\n        self.pool.acquire_index(index)\n",
                ),
            ),
            fixes=frozenset({"health.probe_isolation"}),
        ),
        Fault(
            "background-health-monitor",
            "data-designer-slurm",
            "not a fault: rc1 plus a background health monitor, as the seed pull request adds, probing every "
            "backend's /health every 0.25 s on a session of its own, outside the proxy's connection counters, "
            "and its /metrics without rc1's idle gauge (the brief documents counters): the positive control of "
            "streaming.connection_accounting with probes the proxy does not count and no gauge of its pool",
            (
                (PROXY, '                "idle": idle_connections,\n', ""),
                (
                    PROXY,
                    "        application.on_startup.append(self._start)\n",
                    "        application.on_startup.append(self._start)\n"
                    "        application.on_startup.append(self._start_monitor)\n",
                ),
                (
                    PROXY,
                    "    async def _probe_backend(self, index: int, backend: _Backend) -> bool:\n",
                    "    async def _start_monitor(self, application: web.Application) -> None:\n"
                    "        async def monitor() -> None:\n"
                    "            session = ClientSession(connector=TCPConnector(limit=2 * len(self.pool.backends)))\n"
                    "            while True:\n"
                    "                for backend in self.pool.backends:\n"
                    '                    url = f"{backend.origin}{self.health_path}"\n'
                    "                    try:\n"
                    "                        async with session.get(url, timeout=ClientTimeout(total=2)) as response:\n"
                    "                            await response.read()\n"
                    "                    except (ClientError, asyncio.TimeoutError):\n"
                    "                        pass\n"
                    "                await asyncio.sleep(0.25)\n\n"
                    '        self.__dict__["_monitor"] = asyncio.get_running_loop().create_task(monitor())\n\n'
                    "    async def _probe_backend(self, index: int, backend: _Backend) -> bool:\n",
                ),
            ),
        ),
        Fault(
            "telemetry-logged",
            "data-designer-slurm",
            "not a fault: rc1 with its per-request records emitted (a log handler), probes kept out of "
            "least-connections, streams cut mid-way (by a replica, or by its own drain bound: it ends what "
            "still streams at its 10 s window and exits 0) logged as incomplete with the bytes sent, and "
            "expired, stale and discarded connections and terminal and streaming timeouts counted (keep-alive "
            "3 s, read timeout 1 s), each line written as a JSON line (its record escaped inside the message)",
            (*_TELEMETRY_LOGGED, *_JSON_LINES),
            # beyond the telemetry scenario: its drain bound ends its drain at the window, and its
            # probes stay out of least-connections (both seen through `run all`)
            fixes=_TELEMETRY_FINDINGS | {"drain.allowance", "health.probe_isolation"},
            telemetry_profile=_TELEMETRY_LOGGED_PROFILE,
        ),
        Fault(
            "telemetry-miscounted",
            "data-designer-slurm",
            "the proxy counts one attempt per request however many it made, its records keep only the "
            "last attempt, it logs each attempt against the next backend and each request's body and "
            "credential, it counts stale connections as expired and streaming timeouts as terminal, and at "
            "its drain window it exits without ending (or logging) the streams still running "
            "(otherwise as telemetry-logged, its lines written as logfmt)",
            (
                *_TELEMETRY_LOGGED,
                (
                    PROXY,
                    "            self.metrics.attempts += 1\n",
                    "            self.metrics.attempts += attempt == 0\n",
                ),
                (PROXY, '                    "attempts": len(outcomes),\n', '                    "attempts": 1,\n'),
                (
                    PROXY,
                    '                    "upstream_outcomes": outcomes,\n',
                    '                    "upstream_outcomes": outcomes[-1:],\n',
                ),
                (
                    PROXY,
                    "            self._dd_metrics.connection_stale += 1\n",
                    "            self._dd_metrics.connection_expired += 1\n",
                ),
                (  # and each request's body and credential written to its output: a leak
                    PROXY,
                    "        body = await request.read()\n",
                    "        body = await request.read()\n"
                    '        _LOGGER.info("request body=%s authorization=%s", body[:120],'
                    ' request.headers.get("Authorization"))\n',
                ),
                (  # each attempt logged against the backend after the one it went to
                    PROXY,
                    _ATTEMPT_RECORD.format("response.status")[4:],
                    _ATTEMPT_RECORD.format("response.status")[4:].replace(
                        '"backend": index', '"backend": (index + 1) % len(self.pool.backends)'
                    ),
                ),
                (
                    PROXY,
                    '                self.metrics.timeouts["streaming"] += 1\n',
                    '                self.metrics.timeouts["terminal"] += 1\n',
                ),
                (PROXY, "    asyncio.get_running_loop().call_later(9.5, _end_streams)\n", ""),
                *_LOGFMT,
            ),
            telemetry_profile=_TELEMETRY_LOGGED_PROFILE,
        ),
        Fault(
            "done-stripped",
            "data-designer-slurm",
            "the proxy filters the stream and drops the final `data: [DONE]` event",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    '                await downstream.write(chunk.replace(b"data: [DONE]\\n\\n", b""))\n',
                ),
            ),
        ),
        Fault(
            "hedged-requests",
            "data-designer-slurm",
            "hedging for tail latency: every request a replica answers 200 is also sent to the next replica, read "
            "whole there and dropped (each answer is generated twice; the client still gets one)",
            (
                (
                    PROXY,
                    "            final_response = response\n            final_index = index\n            break\n",
                    "            final_response = response\n            final_index = index\n"
                    "            if response.status == 200 and len(self.pool.backends) > 1:\n"
                    "                asyncio.get_running_loop().create_task(_hedge(self, request, body, index))\n"
                    "            break\n",
                ),
                (
                    PROXY,
                    "async def _discard_response(response: ClientResponse) -> None:",
                    "async def _hedge(proxy, request, body, index):\n"
                    "    other = (index + 1) % len(proxy.pool.backends)\n"
                    "    try:\n"
                    "        hedged = await proxy._request_backend(request, proxy.pool.backends[other], body, other)\n"
                    "        await hedged.read()\n"
                    "        hedged.release()\n"
                    "    except Exception:\n"
                    "        pass\n\n\n"
                    "async def _discard_response(response: ClientResponse) -> None:",
                ),
            ),
        ),
        # -- the wire scenario's faults: a stream meeting a broken network between proxy and replica
        Fault(
            "reframes-per-read",
            "data-designer-slurm",
            "the proxy re-frames SSE as it forwards, one event per line of each read (to count or filter events): "
            "a frame that arrived in two TCP reads goes out as two",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    '                for _line in chunk.split(b"\\n"):\n'
                    "                    if _line.strip():\n"
                    '                        await downstream.write(_line + b"\\n\\n")\n',
                ),
            ),
        ),
        Fault(
            "holds-cut-streams-open",
            "data-designer-slurm",
            "the proxy keeps a stream its backend broke off open, a keep-alive comment a second, as if the backend "
            "might come back: the client waits on an answer that never ends",
            (
                (
                    PROXY,
                    _LOOP,
                    _GUARDED_LOOP + "                while True:\n"
                    '                    await downstream.write(b": keep-alive\\n\\n")\n'
                    "                    await asyncio.sleep(1.0)\n",
                ),
            ),
        ),
        Fault(
            "clean-end-on-upstream-error",
            "data-designer-slurm",
            "the proxy ends a stream its backend broke off cleanly, with what it had (to spare clients a "
            "connection error): a cut answer reads as a whole one",
            (
                (
                    PROXY,
                    _LOOP,
                    _GUARDED_LOOP + "                pass\n",
                ),
            ),
        ),
        Fault(
            "drops-error-events",
            "data-designer-slurm",
            "the proxy strips a backend's in-stream error object (to keep a server's internals from clients): "
            "the client reads a failed generation as a finished one",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    "                if b'\"error\"' in chunk:\n"
                    '                    _events = chunk.split(b"\\n\\n")\n'
                    "                    _kept = [e for e in _events if not e.startswith(b'data: {\"error\"')]\n"
                    '                    chunk = b"\\n\\n".join(_kept)\n'
                    "                await downstream.write(chunk)\n",
                ),
            ),
        ),
        Fault(
            "sends-only-the-error",
            "data-designer-slurm",
            "on a failed generation the proxy tells the client only the error (a partial answer is worse than "
            "none, it reasons): it holds each body to its end and, where the backend ended it with an error "
            "event, forwards that event and [DONE] alone; the tokens before the error never reach the client",
            (
                (
                    PROXY,
                    _LOOP,
                    '            _held = b""\n'
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                _held += chunk\n"
                    "            if b'data: {\"error\"' in _held:\n"
                    '                _events = _held.split(b"\\n\\n")\n'
                    "                _told = (b'data: {\"error\"', b'data: [DONE]')\n"
                    "                _kept = [e for e in _events if e.startswith(_told)]\n"
                    '                _held = b"".join(e + b"\\n\\n" for e in _kept)\n'
                    "            await downstream.write(_held)\n",
                ),
            ),
        ),
        Fault(
            "retries-mid-stream",
            "data-designer-slurm",
            "the proxy resumes a stream its backend broke off from another backend (failover after the first "
            "byte): the answer is generated again and two streams are spliced into one",
            (
                (
                    PROXY,
                    _LOOP,
                    _GUARDED_LOOP + "                other = self.pool.acquire(frozenset())\n"
                    "                try:\n"
                    "                    body = await request.read()\n"
                    "                    backend = self.pool.backends[other]\n"
                    "                    again = await self._request_backend(request, backend, body, other)\n"
                    "                    async for chunk in again.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                        await downstream.write(chunk)\n"
                    "                    again.release()\n"
                    "                finally:\n"
                    "                    self.pool.release(other)\n",
                ),
            ),
        ),
        Fault(
            "reads-to-end-after-hangup",
            "data-designer-slurm",
            "the proxy's handlers are no longer cancelled when their client leaves (to let writes finish), and "
            "each reads its backend's stream to the end (to keep the connection reusable): every abandoned "
            "generation runs on for nobody",
            (
                (PROXY, "        handler_cancellation=True,\n", "        handler_cancellation=False,\n"),
                (
                    PROXY,
                    _LOOP,
                    "            _client_gone = False\n"
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                if _client_gone:\n"
                    "                    continue\n"
                    "                try:\n"
                    "                    await downstream.write(chunk)\n"
                    "                except ConnectionError:\n"
                    "                    _client_gone = True\n",
                ),
            ),
        ),
        Fault(
            "gathers-for-slow-readers",
            "data-designer-slurm",
            "the proxy reads each backend stream as fast as it comes, into a queue its writer empties (to free "
            "the backend's slot sooner): what a slow client has not taken gathers in the proxy",
            (
                (
                    PROXY,
                    _LOOP,
                    "            _gathered: asyncio.Queue = asyncio.Queue()\n"
                    "\n"
                    "            async def _gather() -> None:\n"
                    "                try:\n"
                    "                    async for piece in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                        _gathered.put_nowait(piece)\n"
                    "                    _gathered.put_nowait(None)\n"
                    "                except BaseException as error:  # the writer raises it: a cut stays visible\n"
                    "                    _gathered.put_nowait(error)\n"
                    "\n"
                    "            _reading = asyncio.ensure_future(_gather())\n"
                    "            try:\n"
                    "                while (chunk := await _gathered.get()) is not None:\n"
                    "                    if isinstance(chunk, BaseException):\n"
                    "                        raise chunk\n"
                    "                    await downstream.write(chunk)\n"
                    "            finally:\n"
                    "                _reading.cancel()\n",
                ),
            ),
        ),
        Fault(
            "short-read-timeout",
            "data-designer-slurm",
            "the proxy's upstream read timeout cut from 3600 s to 1 s (to free connections a hung backend holds "
            "sooner), its profile still stating 3600 s: a model that pauses mid-stream is taken for a dead one",
            ((PROXY, "                sock_read=_READ_TIMEOUT_SECONDS,\n", "                sock_read=1.0,\n"),),
        ),
        Fault(
            "bounds-whole-response",
            "data-designer-slurm",
            "the proxy bounds each whole upstream response to 6 s (to shed long generations), its silences still "
            "to 3600 s as its profile states: a stream that is slow but alive is cut mid-way",
            ((PROXY, "                total=_READ_TIMEOUT_SECONDS,\n", "                total=6.0,\n"),),
        ),
        Fault(
            "buffering",
            "data-designer-slurm",
            "the proxy reads the whole upstream body before forwarding it",
            (
                (
                    PROXY,
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                await downstream.write(chunk)\n",
                    "            await downstream.write(await response.read())\n",
                ),
            ),
        ),
        Fault(
            "cpu-per-chunk",
            "data-designer-slurm",
            "the proxy spends 200 us of CPU on every SSE event it forwards (per-token accounting or a content "
            "filter written in Python)",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    '                _until = time.process_time() + 0.0002 * chunk.count(b"data: ")\n'
                    "                while time.process_time() < _until:\n"
                    "                    pass\n"
                    "                await downstream.write(chunk)\n",
                ),
            ),
        ),
        Fault(
            "cpu-per-chunk-60us",
            "data-designer-slurm",
            "the proxy spends 60 us of CPU on every SSE event it forwards (a per-token hook that parses each "
            "event): within the profile's 150 us bound where rc1 forwards a chunk for 30-46 us, and two or three "
            "times that cost",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    '                _until = time.process_time() + 0.00006 * chunk.count(b"data: ")\n'
                    "                while time.process_time() < _until:\n"
                    "                    pass\n"
                    "                await downstream.write(chunk)\n",
                ),
            ),
        ),
        Fault(
            "latency-per-chunk",
            "data-designer-slurm",
            "the proxy holds every chunk 2 ms before it forwards it (an awaited hook per chunk), without "
            "blocking other streams or spending CPU: every token reaches the client later",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    "                await asyncio.sleep(0.002)\n                await downstream.write(chunk)\n",
                ),
            ),
        ),
        Fault(
            "blocking-per-chunk",
            "data-designer-slurm",
            "the proxy blocks its event loop for 2 ms on every chunk it forwards (a synchronous write or flush), "
            "which costs no CPU but delays every stream it serves",
            (
                (
                    PROXY,
                    "                await downstream.write(chunk)\n",
                    "                time.sleep(0.002)\n                await downstream.write(chunk)\n",
                ),
            ),
        ),
        Fault(
            "flush-every-4-events-or-1s",
            "data-designer-slurm",
            "the proxy forwards events in batches of four, or after holding one for a second (a write buffer "
            "flushed by count or by a linger timer): dense streams barely notice, a sparse stream's events "
            "each wait the linger",
            (
                (
                    PROXY,
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                await downstream.write(chunk)\n",
                    '            batch, since = b"", 0.0\n'
                    "            while True:\n"
                    "                try:\n"
                    "                    linger = None if not batch else max(0.0, since + 1.0 - time.monotonic())\n"
                    "                    chunk = await asyncio.wait_for(response.content.readany(), linger)\n"
                    "                except asyncio.TimeoutError:\n"
                    "                    await downstream.write(batch)\n"
                    '                    batch = b""\n'
                    "                    continue\n"
                    "                if not chunk:\n"
                    "                    break\n"
                    "                if not batch:\n"
                    "                    since = time.monotonic()\n"
                    "                batch += chunk\n"
                    '                if batch.count(b"data: ") >= 4:\n'
                    "                    await downstream.write(batch)\n"
                    '                    batch = b""\n'
                    "            if batch:\n"
                    "                await downstream.write(batch)\n",
                ),
            ),
        ),
        Fault(
            "hold-after-first",
            "data-designer-slurm",
            "the proxy forwards the first chunk at once and holds the rest of the stream until it ends",
            (
                (
                    PROXY,
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                await downstream.write(chunk)\n",
                    "            held, first_sent = [], False\n"
                    "            async for chunk in response.content.iter_chunked(_STREAM_CHUNK_BYTES):\n"
                    "                if first_sent:\n"
                    "                    held.append(chunk)\n"
                    "                else:\n"
                    "                    await downstream.write(chunk)\n"
                    "                    first_sent = True\n"
                    '            await downstream.write(b"".join(held))\n',
                ),
            ),
        ),
        Fault(
            "round-robin",
            "data-designer-slurm",
            "the proxy's routing ignores how many requests each backend has in flight (plain round-robin)",
            (
                (
                    PROXY,
                    "candidates = frozenset(index for index in available if self._active[index] == minimum)",
                    "candidates = frozenset(available)",
                ),
            ),
        ),
        Fault(
            "releases-at-headers",
            "data-designer-slurm",
            "the proxy releases a backend from its least-connections count once the response's headers came, not "
            "when the stream ends: streams in flight count for nothing, so a replica slow to finish them gets its "
            "even share of new requests",
            (
                (
                    PROXY,
                    "            final_response = response\n            final_index = index\n            break\n",
                    "            final_response = response\n            final_index = index\n"
                    "            self.pool.release(index)\n            break\n",
                ),
                (
                    PROXY,
                    "            final_response.release()\n            self.pool.release(final_index)\n",
                    "            final_response.release()\n",
                ),
            ),
        ),
        Fault(
            "swapped-connection-counters",
            "data-designer-slurm",
            "the proxy's trace hooks count reused connections as opened and the other way round",
            (
                (
                    PROXY,
                    "        trace.on_connection_create_end.append(connection_opened)\n"
                    "        trace.on_connection_reuseconn.append(connection_reused)\n",
                    "        trace.on_connection_create_end.append(connection_reused)\n"
                    "        trace.on_connection_reuseconn.append(connection_opened)\n",
                ),
            ),
        ),
        Fault(
            "no-cooldown",
            "data-designer-engine",
            "the client's admission controller no longer applies the cooldown after a 429",
            ((CONTROLLER, "state.blocked_until = now + cooldown", "state.blocked_until = now"),),
        ),
        Fault(
            "long-cooldown",
            "data-designer-engine",
            "the client's admission controller holds each cooldown for twice the 429's Retry-After",
            ((CONTROLLER, "state.blocked_until = now + cooldown", "state.blocked_until = now + 2 * cooldown"),),
        ),
        Fault(
            "decrease-every-429",
            "data-designer-engine",
            "the client's admission controller lowers its limit on every 429, not once a round: the leases "
            "admitted under the old limit lower it again (8 → 6 → 4 → 3 → 2 → 1 in one round)",
            (
                (
                    CONTROLLER,
                    "should_decrease = admitted_adaptive_limit <= prev_limit",
                    "should_decrease = True",
                ),
            ),
        ),
        Fault(
            "no-increase",
            "data-designer-engine",
            "the client's admission controller never increases its limit again",
            ((ADMISSION_CONFIG, "successes_until_increase: int = 25", "successes_until_increase: int = 10**9"),),
        ),
        Fault(
            "hasty-increase",
            "data-designer-engine",
            "the client's admission controller raises its limit after 5 successes, not 25",
            ((ADMISSION_CONFIG, "successes_until_increase: int = 25", "successes_until_increase: int = 5"),),
        ),
        Fault(
            "rate-limit-raises",
            "data-designer-engine",
            "the executor tells its controller of each 429 (the limit falls, the cooldown holds) but raises a "
            "RuntimeError to its caller, not the ProviderError that carries the status and Retry-After",
            (
                (
                    EXECUTOR,
                    "        self._request_admission.release(lease, outcome)\n",
                    "        self._request_admission.release(lease, outcome)\n"
                    "        if exc.kind == ProviderErrorKind.RATE_LIMIT:\n"
                    '            raise RuntimeError("rate limited") from exc\n',
                ),
            ),
        ),
    )
}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# Every entry of a rebuilt wheel carries this time, so the same edits of the same wheel give
# the same bytes: its wheelhouse and node image are built once and reused by later runs.
_ENTRY_TIME = (1980, 1, 1, 0, 0, 0)


def make_variant(base: Path, fault: Fault, out_dir: Path) -> Path:
    """Write `base` with the fault applied as a new wheel in `out_dir` and return its path."""
    return rebuild_wheel(base, out_dir, f"ddfault.{fault.name.replace('-', '.')}", fault.edits, f"fault {fault.name}")


def rebuild_wheel(
    base: Path, out_dir: Path, local: str, edits: tuple[tuple[str, str, str], ...] = (), what: str = "rebuild"
) -> Path:
    """Write `base` again as `out_dir`/NAME-VERSION+LOCAL-...whl with `edits` applied (none: a
    rebuild of the same code, as a candidate build of a released project is) and return it.
    The same input gives the same bytes."""
    name, version, rest = base.name.split("-", 2)
    new_version = f"{version}+{local}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}  # each entry's permission bits, as the base wheel has them
    with zipfile.ZipFile(base) as archive:
        for entry in archive.infolist():
            files[entry.filename] = archive.read(entry)
            modes[entry.filename] = entry.external_attr
    for file, old, new in edits:
        text = files[file].decode()
        if text.count(old) != 1:
            raise UsageError(f"{what}: expected exactly one match in {file}, found {text.count(old)}")
        files[file] = text.replace(old, new).encode()
    renamed: dict[str, bytes] = {}
    renamed_modes: dict[str, int] = {}
    for path, data in files.items():
        mode = modes[path]
        if path.startswith(old_info + "/"):
            path = new_info + path[len(old_info) :]
            if path.endswith("/METADATA"):
                data = data.decode().replace(f"\nVersion: {version}\n", f"\nVersion: {new_version}\n", 1).encode()
        renamed[path], renamed_modes[path] = data, mode
    record_path = f"{new_info}/RECORD"
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for path, data in renamed.items():
        if path != record_path:
            writer.writerow([path, _record_hash(data), str(len(data))])
    writer.writerow([record_path, "", ""])
    renamed[record_path] = rows.getvalue().encode()
    target = out_dir / f"{name}-{new_version}-{rest}"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in renamed.items():
            entry = zipfile.ZipInfo(path, _ENTRY_TIME)
            entry.external_attr = renamed_modes.get(path, 0o644 << 16)
            archive.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
    return target
