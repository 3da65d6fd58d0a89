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

    def to_argv(self) -> list[str]:
        """The load client's command-line flags for this workload (parsed back in __main__)."""
        argv = [
            "--endpoint", self.endpoint,
            "--records", str(self.records),
            "--concurrency", str(self.concurrency),
            "--max-tokens", str(self.max_tokens),
            "--prompt-chars", str(self.prompt_chars),
            "--admission-limit", str(self.admission_limit),
            "--deadline-s", str(self.deadline_s),
            "--max-record-attempts", str(self.max_record_attempts),
            "--model", self.model,
            "--run-tag", self.run_tag,
        ]  # fmt: skip
        if not self.stream:
            argv.append("--no-stream")
        for name, value in self.headers:
            argv += ["--header", f"{name}: {value}"]
        return argv


def parse_header(text: str) -> tuple[str, str]:
    """`NAME: VALUE` → (NAME, VALUE); the value never appears in the error."""
    name, separator, value = text.partition(":")
    if not separator or not name.strip():
        raise ValueError("--header must be NAME: VALUE (the value is not shown: it may be a secret)")
    return name.strip(), value.strip()
