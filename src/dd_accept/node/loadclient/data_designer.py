"""The real client path of data-designer: admission controller + executor + HTTP adapter.

Built exactly as the seed pull request's live tests did (brief, fact 6): the
OpenAI-compatible adapter in async mode, wrapped by `ModelRequestExecutor`, admitted by
`AdaptiveRequestAdmissionController` registered with `max_parallel_requests` = the initial
admission limit. The executor does not retry a 429; like the generation engine, this
client retries the record, and the controller makes it wait out the cooldown first.
Every admission event goes to the JSONL timeline through the controller's event sink.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from data_designer.engine.models.clients.adapters.http_model_client import ClientConcurrencyMode
from data_designer.engine.models.clients.adapters.openai_compatible import OpenAICompatibleClient
from data_designer.engine.models.clients.errors import ProviderError, ProviderErrorKind
from data_designer.engine.models.clients.model_request_executor import ModelRequestExecutor
from data_designer.engine.models.clients.types import ChatCompletionRequest
from data_designer.engine.models.request_admission.controller import AdaptiveRequestAdmissionController

from dd_accept.base.events import AdmissionChange, ClientRequest, EventWriter
from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node.loadclient.schedule import TIMED_OUT
from dd_accept.node.loadclient.workload import Workload

PROVIDER = "dd-accept"
ALIAS = "dd-accept-model"


class AdmissionTimeline:
    """The controller's event sink: one JSONL line per admission event, with its numbers."""

    def __init__(self, events: EventWriter) -> None:
        self.events = events

    def emit_request_event(self, event: Any) -> None:
        snapshot = getattr(event, "pressure_snapshot", None)

        def field(name: str) -> Any:
            # The event carries its snapshot in JSON-safe form (a mapping) in 1.0.
            if isinstance(snapshot, dict):
                return snapshot.get(name)
            return getattr(snapshot, name, None)

        cooldown = field("cooldown_remaining_seconds")
        self.events.write(
            AdmissionChange(
                event=str(getattr(event, "event_kind", "")),
                reason=getattr(event, "reason_or_outcome", None),
                limit=field("current_limit"),
                in_flight=field("in_flight_count"),
                waiters=field("waiters"),
                cooldown_s=round(float(cooldown), 4) if cooldown is not None else None,
                lease=getattr(event, "request_lease_id", None),
            )
        )


def build_executor(workload: Workload, events: EventWriter) -> ModelRequestExecutor:
    controller = AdaptiveRequestAdmissionController(event_sink=AdmissionTimeline(events))
    controller.register(
        provider_name=PROVIDER,
        model_id=workload.model,
        alias=ALIAS,
        max_parallel_requests=workload.admission_limit,
    )
    inner = OpenAICompatibleClient(
        provider_name=PROVIDER,
        endpoint=f"{workload.endpoint}/v1",
        max_parallel_requests=workload.admission_limit,
        timeout_s=workload.deadline_s,
        concurrency_mode=ClientConcurrencyMode.ASYNC,
    )
    return ModelRequestExecutor(inner, controller, PROVIDER, workload.model)


async def run_sut(workload: Workload, events: EventWriter) -> dict[str, int]:
    executor = build_executor(workload, events)
    deadline = time.monotonic() + workload.deadline_s
    pending = list(range(workload.records))
    completed = 0

    async def one(record: int, attempt: int) -> bool:
        request_id = f"{workload.run_tag}{record}.{attempt}"
        request = ChatCompletionRequest(
            model=workload.model,
            messages=[{"role": "user", "content": workload.prompt()}],
            max_tokens=workload.max_tokens,
            extra_headers={**dict(workload.request_headers), "x-dd-request-id": request_id},
        )
        clock = WallAnchor()  # one wall-clock reading per attempt (base.wall_clock)

        def emit(**outcome: Any) -> None:
            ended = time.monotonic()
            events.write(
                ClientRequest(
                    mode="sut", request_id=request_id, record=record, attempt=attempt, started=round(clock.wall, 6),
                    t=round(clock.at(ended), 6), latency_s=round(ended - clock.mono, 6), **outcome,
                )
            )  # fmt: skip

        try:
            response = await executor.acompletion(request)
        except ProviderError as error:
            limited = error.kind == ProviderErrorKind.RATE_LIMIT
            emit(
                status=error.status_code,
                retry_after=error.retry_after,
                outcome="rate_limited" if limited else "error",
                error=error.kind.value,
            )
            return False
        except Exception as error:  # the SUT's client raised what fact 6 says it does not:
            # evidence for the checks (a 429 it never reports as one), not a crash that leaves none
            emit(status=None, outcome="error", error=f"raised {type(error).__name__}")
            return False
        emit(status=200, outcome="ok", tokens=getattr(getattr(response, "usage", None), "output_tokens", None))
        return True

    async def worker() -> None:
        nonlocal completed
        while pending and time.monotonic() < deadline:
            record = pending.pop(0)
            for attempt in range(workload.max_record_attempts):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    ok = await asyncio.wait_for(one(record, attempt), timeout=remaining)
                except TimeoutError:
                    events.write(ClientRequest(mode="sut", record=record, attempt=attempt, outcome=TIMED_OUT))
                    break
                if ok:
                    completed += 1
                    break

    await asyncio.gather(*(worker() for _ in range(workload.concurrency)))
    return {"records": workload.records, "completed": completed, "incomplete": workload.records - completed}
