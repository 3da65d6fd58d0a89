"""What the load client sends: synthetic prompts of a given size, never real text."""

from __future__ import annotations

import re
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

ARRIVALS = ("concurrency", "constant", "poisson")
# With a canary, each prompt carries PROMPT_CANARY + canary and each request the credential
# CREDENTIAL_CANARY + canary (as `Authorization: Bearer`, unless the user sends their own):
# text that appears nowhere but in what the client sent, so finding it in the SUT's output
# proves the SUT wrote request text or a credential there.
PROMPT_CANARY = "ddprompt"
CREDENTIAL_CANARY = "ddcredential"
CANARY = re.compile(r"[0-9a-f]{8,32}")


def _flag(default: Any, help_text: str) -> Any:
    """A field that travels as its flag, with what `--help` says of it."""
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True, slots=True)
class Workload:
    endpoint: str = field(metadata={"help": "base URL, e.g. http://127.0.0.1:9000"})
    records: int = 16
    concurrency: int = 8
    max_tokens: int = 16
    prompt_chars: int = 64
    stream: bool = True
    model: str = "dd-accept-synthetic"
    admission_limit: int = 8
    deadline_s: float = 120.0
    max_record_attempts: int = 50
    run_tag: str = _flag("", "prefix of request ids (x-dd-request-id), so several client runs never share one")
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (e.g. an API key a user sends)
    # How requests are sent (raw mode): `concurrency` at a time, or arriving at `rate` per
    # second, evenly ("constant") or as a Poisson process ("poisson", from `seed`).
    arrival: str = _flag("concurrency", "how raw requests are sent: " + ", ".join(ARRIVALS))
    rate: float = _flag(0.0, "requests per second (constant, poisson)")
    duration_s: float = _flag(0.0, "stop sending new requests after this long (records is a cap)")
    seed: int = _flag(0, "seed of the Poisson arrivals")
    canary: str = _flag("", "hex the prompts and a credential carry (finds leaks; see PROMPT_CANARY)")
    # what the proxy does with the generation behind a stream a user stops reading is then visible
    hang_up_after: int = _flag(0, "raw: close each stream after N data events (a user who leaves)")
    # the proxy must then hold back what it has not yet sent, not gather it
    read_bytes_per_s: int = _flag(0, "raw: read each stream at most this fast (a client on a slow link)")
    # a stream kept open with keep-alive comments never meets deadline_s (a wait for bytes): a
    # proxy that hangs a cut stream that way is then a hang the client records, not one it joins
    stream_deadline_s: float = _flag(0.0, "raw: give up on a stream this long after sending it (0: no bound)")

    def __post_init__(self) -> None:
        if self.canary and not CANARY.fullmatch(self.canary):
            raise ValueError("canary must be 8 to 32 lowercase hex digits")
        for name in ("records", "concurrency", "max_tokens", "admission_limit", "max_record_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.prompt_chars < 0 or self.deadline_s <= 0:
            raise ValueError("prompt_chars must be >= 0 and deadline_s > 0")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}")
        if (self.arrival != "concurrency") != (self.rate > 0):
            raise ValueError("a rate (> 0) is given with, and only with, a constant or poisson arrival")
        if self.duration_s < 0:
            raise ValueError("duration_s must be >= 0")
        if self.hang_up_after < 0 or self.read_bytes_per_s < 0 or self.stream_deadline_s < 0:
            raise ValueError("hang_up_after, read_bytes_per_s and stream_deadline_s must be >= 0")

    @property
    def connections(self) -> int:
        """The connection pool's size: one per stream in flight (at a rate, the most that can
        be in flight is bounded by the records)."""
        return self.concurrency if self.arrival == "concurrency" else min(self.records, 4096)

    def prompt(self) -> str:
        if not self.canary:
            return "x" * self.prompt_chars
        word = f"{PROMPT_CANARY}{self.canary} "
        return (word * (self.prompt_chars // len(word) + 1))[: max(self.prompt_chars, len(word))]

    @property
    def request_headers(self) -> tuple[tuple[str, str], ...]:
        """What every request carries beyond its id: the user's headers, and with a canary
        its credential where the user sent no Authorization of their own."""
        if not self.canary or any(name.lower() == "authorization" for name, _ in self.headers):
            return self.headers
        return (*self.headers, ("Authorization", f"Bearer {CREDENTIAL_CANARY}{self.canary}"))

    def body(self) -> dict[str, object]:
        """The chat completion request every raw attempt sends."""
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": self.prompt()}],
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }

    def to_argv(self) -> list[str]:
        """The load client's command-line flags for this workload (parsed back in __main__):
        each field away from its default (the endpoint always)."""
        argv: list[str] = []
        for flag_field in flag_fields():
            value = getattr(self, flag_field.name)
            if flag_field.default is MISSING or value != flag_field.default:
                argv += [flag_of(flag_field), str(value)]
        if not self.stream:
            argv.append("--no-stream")
        for name, value in self.headers:
            argv += ["--header", f"{name}: {value}"]
        return argv


# The fields that travel otherwise than as `--field-name VALUE`: `stream` as the switch
# --no-stream, `headers` as one `--header NAME: VALUE` each.
SPELLED_OTHERWISE = ("stream", "headers")


def flag_fields() -> tuple[Field[Any], ...]:
    """The workload's fields that travel as `--field-name VALUE` (__main__ derives its flags)."""
    return tuple(f for f in fields(Workload) if f.name not in SPELLED_OTHERWISE)


def flag_of(flag_field: Field[Any]) -> str:
    return "--" + flag_field.name.replace("_", "-")


def parse_header(text: str) -> tuple[str, str]:
    """`NAME: VALUE` → (NAME, VALUE); the value never appears in the error."""
    name, separator, value = text.partition(":")
    if not separator or not name.strip():
        raise ValueError("--header must be NAME: VALUE (the value is not shown: it may be a secret)")
    return name.strip(), value.strip()
