"""The OpenAI-compatible shapes both synthetic replicas answer with (the ASGI one and the
paced one), written once so a client sees the same completion from either: a choice per
token, the finishing choice, a whole message, the usage block, one SSE event."""

from __future__ import annotations

import json
from typing import Any

TOKEN = "tok "  # every synthetic token's text, unless a response canary is given
RESPONSE_CANARY = "ddresponse"  # with a canary, every token is RESPONSE_CANARY + canary + " "


def token_text(canary: str = "", size: int = 0) -> str:
    """A token's text: found in a SUT's output, the canary proves it wrote response text.
    With a `size`, the text is repeated to that many characters: a large token makes a
    stream's bytes outrun any reader, as a long answer does a slow link."""
    text = f"{RESPONSE_CANARY}{canary} " if canary else TOKEN
    return (text * (size // len(text) + 1))[:size] if size > len(text) else text


def token_choice(chat: bool, *, first: bool, text: str = TOKEN) -> dict[str, Any]:
    """A streamed token's choice; a chat stream's first carries the assistant role."""
    if not chat:
        return {"index": 0, "text": text, "finish_reason": None, "logprobs": None}
    delta = {"content": text, "role": "assistant"} if first else {"content": text}
    return {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}


def final_choice(chat: bool) -> dict[str, Any]:
    """The streamed choice that ends a completion at its token limit."""
    if chat:
        return {"index": 0, "delta": {}, "finish_reason": "length", "logprobs": None}
    return {"index": 0, "text": "", "finish_reason": "length", "logprobs": None}


def whole_choice(chat: bool, tokens: int, token: str = TOKEN) -> dict[str, Any]:
    """A non-streamed completion's choice of `tokens` tokens."""
    text = token * tokens
    if chat:
        return {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length",
            "logprobs": None,
        }
    return {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def sse(data: dict[str, Any]) -> bytes:
    """One `data:` event."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
