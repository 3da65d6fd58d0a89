"""What the load client sends: synthetic prompts of a given size, never real text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Workload:
    endpoint: str
    records: int = 16
    concurrency: int = 8
    max_tokens: int = 16
    prompt_chars: int = 64
    stream: bool = True
    model: str = "dd-accept-synthetic"
    admission_limit: int = 8
    deadline_s: float = 120.0
    max_record_attempts: int = 50
    seed: int = 0
    run_tag: str = ""  # prefix of request ids, so several client runs never share an id
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (e.g. an API key a user sends)

    def __post_init__(self) -> None:
        for name in ("records", "concurrency", "max_tokens", "admission_limit", "max_record_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.prompt_chars < 0 or self.deadline_s <= 0:
            raise ValueError("prompt_chars must be >= 0 and deadline_s > 0")

    def prompt(self) -> str:
        return "x" * self.prompt_chars
