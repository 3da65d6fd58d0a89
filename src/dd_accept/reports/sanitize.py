"""One sanitizer at the boundary: everything written into an evidence bundle passes through it.

Each rule names what it removes; a redaction leaves a placeholder naming the rule, and is
counted per rule and file (never with the text). The audit uses the same rules to look
for anything that got through, so the two can never disagree about what a secret is.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import re
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

SECRET_NAME = r"[A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Za-z0-9_]*"
SYSTEM_ACCOUNTS = frozenset({"root", "nobody", "daemon", "bin", "sys", "munge", "slurm"})


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]
    # Literals one of which every match contains (lower case): the regex runs only on text
    # holding one. A substring search is far cheaper than trying a pattern at every offset.
    hints: tuple[str, ...] = ()

    def may_match(self, lowered: str) -> bool:
        return not self.hints or any(hint in lowered for hint in self.hints)


def _placeholder(name: str) -> Callable[[re.Match[str]], str]:
    return lambda match: f"[redacted:{name}]"


def _keep_name(name: str) -> Callable[[re.Match[str]], str]:
    """Keep the header or variable name, drop its value."""
    return lambda match: f"{match.group(1)}{match.group(2)}[redacted:{name}]"


# Order matters: whole private keys first, then tokens with a recognisable shape, then
# values named as secrets, so the most specific rule gets the count.
SECRET_RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.S),
        _placeholder("private_key"),
        ("private key-----",),
    ),
    Rule(
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        _placeholder("jwt"),
        ("eyj",),
    ),
    Rule("openai_key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{16,}"), _placeholder("openai_key"), ("sk-",)),
    Rule("ngc_key", re.compile(r"\bnvapi-[A-Za-z0-9_-]{16,}"), _placeholder("ngc_key"), ("nvapi-",)),
    Rule("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), _placeholder("huggingface_token"), ("hf_",)),
    Rule(
        "aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), _placeholder("aws_access_key"), ("akia", "asia")
    ),
    Rule(
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
        _placeholder("github_token"),
        ("gh", "github_pat_"),
    ),
    Rule(
        "auth_header",
        re.compile(
            r"(?i)\b((?:proxy-)?authorization|cookie|set-cookie|proxy-[a-z-]+|x-api-key)(\"?[ \t]*[:=][ \t]*\"?)"
            r"(?![ \t\"]*\[redacted)([^\s\"\r\n,}][^\"\r\n,}]*)"
        ),
        _keep_name("auth_header"),
        ("authorization", "cookie", "proxy-", "x-api-key"),
    ),
    Rule(
        "secret_env",
        re.compile(rf"\b({SECRET_NAME})(\"?[ \t]*[:=][ \t]*\"?)(?![ \t]*\[redacted)([^\s\"',}}]+)"),
        _keep_name("secret_env"),
        ("key", "token", "secret", "passw", "credential"),
    ),
)

PRIVATE_IP = re.compile(
    r"\b(?:10\.(?:\d{1,3}\.){2}\d{1,3}|172\.(?:1[6-9]|2\d|3[01])\.\d{1,3}\.\d{1,3}|192\.168\.\d{1,3}\.\d{1,3})\b"
)
HOST_PATH = re.compile(r"(?<![\w.])/(?:home|Users|root)/[^\s\"'<>|:,;)]*")


def host_user_names() -> list[str]:
    """The machine's human accounts (and whoever runs this), never system accounts."""
    names = {getpass.getuser(), os.environ.get("SUDO_USER", ""), os.environ.get("USER", "")}
    with contextlib.suppress(OSError):
        names |= {entry.pw_name for entry in pwd.getpwall() if entry.pw_uid >= 1000 and entry.pw_uid != 65534}
    return sorted(name for name in names if len(name) >= 3 and name not in SYSTEM_ACCOUNTS)


@dataclass
class Sanitizer:
    """Removes secrets and identifying host details; remembers how many of each, where."""

    path_roots: dict[str, str] = field(default_factory=dict)  # host directory → placeholder
    user_names: list[str] = field(default_factory=host_user_names)
    host_name: str = field(default_factory=socket.gethostname)
    home: str = field(default_factory=lambda: str(Path.home()))
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    _ips: dict[str, str] = field(default_factory=dict)

    def literal_rules(self) -> list[Rule]:
        """Rules made from this machine: its paths, users and name (audited the same way)."""
        rules = []
        for root, placeholder in sorted(self.path_roots.items(), key=lambda item: -len(item[0])):
            if not root.rstrip("/"):
                continue  # "/" (a run started from the root directory) is not a host detail to hide
            rules.append(
                Rule("host_path", re.compile(re.escape(root.rstrip("/")) + r"(?=/|\b)"), lambda m, p=placeholder: p)
            )
        if self.home not in ("/", "") and not any(r == self.home for r in self.path_roots):
            rules.append(
                Rule(
                    "home_directory",
                    re.compile(re.escape(self.home) + r"(?=/|\b)"),
                    lambda m: "~",
                    (self.home.lower(),),
                )
            )
        rules.append(Rule("host_path", HOST_PATH, _placeholder("host_path"), ("/home/", "/users/", "/root/")))
        for name in self.user_names:
            rules.append(
                Rule("host_user", re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])"), _placeholder("host_user"))
            )
        if len(self.host_name) >= 3 and self.host_name not in ("localhost",):
            rules.append(
                Rule(
                    "host_name",
                    re.compile(rf"(?<![\w-]){re.escape(self.host_name)}(?![\w-])"),
                    _placeholder("host_name"),
                )
            )
        return rules

    def rules(self) -> list[Rule]:
        return self._rules

    @cached_property
    def _rules(self) -> list[Rule]:
        """Compiled once: the fields they are made from are fixed when the sanitizer is made."""
        return [*SECRET_RULES, *self.literal_rules()]

    def _ip(self, match: re.Match[str]) -> str:
        return self._ips.setdefault(match.group(0), f"private-ip-{len(self._ips) + 1}")

    def text(self, text: str, where: str) -> str:
        lowered = text.lower()  # for the hints; refreshed only when a rule changed the text
        for rule in self.rules():
            if not rule.may_match(lowered):
                continue
            text, count = rule.pattern.subn(rule.replace, text)
            if count:
                self.counts[(rule.name, where)] += count
                lowered = text.lower()
        text, count = PRIVATE_IP.subn(self._ip, text)
        if count:
            self.counts[("private_ip", where)] += count
        return text

    def report(self) -> dict[str, object]:
        """For redactions.json: counts per rule and file, never the text."""
        by_rule: Counter[str] = Counter()
        for (rule, _), count in self.counts.items():
            by_rule[rule] += count
        return {
            "by_rule": dict(sorted(by_rule.items())),
            "by_file": [
                {"file": where, "rule": rule, "count": count} for (rule, where), count in sorted(self.counts.items())
            ],
        }


def findings(text: str, rules: Iterable[Rule]) -> list[str]:
    """Which rules match in `text` (for the audit): names only, never what matched."""
    lowered = text.lower()
    found = [rule.name for rule in rules if rule.may_match(lowered) and rule.pattern.search(text)]
    if PRIVATE_IP.search(text):
        found.append("private_ip")
    return found
