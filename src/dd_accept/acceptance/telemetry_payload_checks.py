"""The telemetry check that the proxy's logs and metrics hold no payload: no prompt, no
response text and no credential the client sent, found by canaries planted in each and by
the secrets the user passed (`--client-header`); a match is shown by its first characters
only.
"""

from __future__ import annotations

from dd_accept.acceptance.registry import check
from dd_accept.base.results import CheckResult
from dd_accept.node.loadclient.workload import CREDENTIAL_CANARY, PROMPT_CANARY
from dd_accept.node.replica.openai_shapes import RESPONSE_CANARY

# Enough of a canary that no other text holds it by chance, little enough that a record
# that cuts the prompt or the credential short still shows it.
CANARY_SHOWN = 8


METRIC_NAMES = {"prompt": "prompt", "credential": "header", "response": "response"}


def sent_secrets(headers: tuple[str, ...]) -> tuple[str, ...]:
    """The parts of the user's own credential headers (`Authorization`, an API key, a token,
    a cookie) that only they hold: each word of 8 characters or more of the value."""
    found = []
    for header in headers:
        name, _, value = header.partition(":")
        if any(word in name.lower() for word in ("auth", "key", "token", "cookie", "secret", "password")):
            found += [word for word in value.split() if len(word) >= 8]
    return tuple(found)


@check("telemetry.no_payloads")
def no_payloads(lines: list[str], canary: str, user_secrets: tuple[str, ...] = ()) -> CheckResult:
    """The proxy's output holds no request text, no response text and no credential (the
    seed: its records carry no "payloads or credentials"). Every prompt of the run carried
    the canary, every request a credential made from it (or the user's own, whose words
    are looked for), every token the replicas streamed: text found nowhere but in what
    the client and the replicas sent, even cut short to its first characters. Judged
    whatever the SUT claims: a proxy that writes nothing leaks nothing."""
    expected_text = "no line the proxy wrote holds a prompt, a response's text or a credential the client sent"
    shown = canary[:CANARY_SHOWN]
    marks = {
        "prompt": (f"{PROMPT_CANARY}{shown}",),
        "credential": (f"{CREDENTIAL_CANARY}{shown}", *user_secrets),
        "response": (f"{RESPONSE_CANARY}{shown}",),
    }
    found = {what: [i for i, line in enumerate(lines) if any(m in line for m in ms)] for what, ms in marks.items()}
    leaked = {what: where for what, where in found.items() if where}
    observed = f"{len(lines)} lines written by the proxy in the run" + (
        "; " + ", ".join(f"{what} text in {len(where)}" for what, where in leaked.items()) if leaked else ""
    )
    detail = "; ".join(
        f"{what} text on the proxy's output (line {', '.join(str(i + 1) for i in where[:3])}"
        f"{' ...' if len(where) > 3 else ''})"
        for what, where in leaked.items()
    )
    return CheckResult.judge(
        no_payloads.check_id,
        not leaked,
        expected_text,
        observed,
        detail,
        # a metric named after a credential would be redacted as one: the header it rode in names it
        {
            "lines": float(len(lines)),
            **{f"{METRIC_NAMES[what]}_lines": float(len(where)) for what, where in found.items()},
        },
    )
