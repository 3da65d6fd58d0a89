"""One sanitizer at the boundary: everything written into an evidence bundle passes through it.

It understands structure: JSON and JSONL are parsed and sanitized value by value (a key named
like a secret redacts its value whatever the value looks like) and re-encoded, so the output
is always valid JSON; text is sanitized with quoting understood (`secrets.py`). Each
redaction leaves a placeholder naming its rule and is counted per rule and file, never with
the text. The audit runs this same sanitizer and reports what it would still change, so
"sanitized" and "passes the audit" mean the same thing.

Host details are of *this run*: the invoking user, `SUDO_USER` and the owner of the home
directory (not every account of the machine), the host's names and domain, its paths and
private addresses. The bundle records keyed digests of the user and host names
(`host_identity`), so auditing a bundle checks for *its* names, not the auditor's.
"""

from __future__ import annotations

import bisect
import contextlib
import getpass
import hashlib
import json
import os
import pwd
import re
import secrets as random_secrets
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from dd_accept.reports.secrets import PLACEHOLDER, REDACTED_PREFIX, is_secret_name, redact_secrets

SYSTEM_ACCOUNTS = frozenset({"root", "nobody", "daemon", "bin", "sys", "munge", "slurm", "www-data"})
PRIVATE_IP = re.compile(
    r"(?<![\d.])(?:10\.\d{1,3}\.\d{1,3}\.\d{1,3}|172\.(?:1[6-9]|2\d|3[01])\.\d{1,3}\.\d{1,3}"
    r"|192\.168\.\d{1,3}\.\d{1,3}|100\.(?:6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d{1,3}\.\d{1,3}"
    r"|169\.254\.\d{1,3}\.\d{1,3})(?![\d.]*\d)"
)
PRIVATE_IPV6 = re.compile(r"(?i)(?<![0-9a-f:])(?:f[cd][0-9a-f]{2}|fe[89ab][0-9a-f]):[0-9a-f:]{1,38}+(?:%\w+)?")
CLOUD_HOST = re.compile(r"(?i)\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[a-z0-9-]{1,63}+)*+")
# `*.internal` names are found from their suffix backwards (a forward pattern would retry
# from every label of a long dotted run): the window before each `.internal` is bounded.
INTERNAL_SUFFIX = re.compile(r"(?i)\.internal\b")
INTERNAL_NAME = re.compile(r"(?i)(?<![a-z0-9.-])(?:[a-z0-9-]{1,63}\.){0,9}[a-z0-9-]{1,63}\Z")
HOME_PATH = re.compile(r"(?<![\w.])/(?:home|Users|root)/[^\s\"'<>|:,;)\]}]*+")
SITE_ROOTS = ("data", "scratch", "work", "lustre", "gpfs", "projects", "project", "nfs", "fs", "shared")
WORD_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,62}")


def run_user_names() -> list[str]:
    """The accounts this run acts for: the invoking user, who ran sudo, who owns the home
    directory. Not every account of the machine: that made the verdict depend on the
    machine, and turned `ubuntu:24.04` into a redaction wherever an `ubuntu` user existed."""
    names = {getpass.getuser(), os.environ.get("SUDO_USER", ""), os.environ.get("USER", "")}
    names.add(os.environ.get("LOGNAME", ""))
    with contextlib.suppress(OSError, KeyError):
        names.add(pwd.getpwuid(Path.home().stat().st_uid).pw_name)
    return sorted(name for name in names if len(name) >= 3 and name not in SYSTEM_ACCOUNTS)


def host_names() -> list[str]:
    """This host's name, its short name and its domain (from the FQDN), each once."""
    names = {socket.gethostname()}
    fqdn = socket.getfqdn()
    names.add(fqdn)
    if "." in fqdn:
        short, _, domain = fqdn.partition(".")
        names |= {short}
        if domain.count(".") >= 1 and domain not in ("localdomain", "local"):
            names.add(domain)
    return sorted(n for n in names if len(n) >= 3 and n.lower() not in ("localhost", "localhost.localdomain"))


def identity_digest(salt: str, name: str) -> str:
    return hashlib.blake2b(name.lower().encode(), key=salt.encode()[:64], digest_size=16).hexdigest()


@dataclass
class Sanitizer:
    """Removes secrets and identifying host details; remembers how many of each, where."""

    path_roots: dict[str, str] = field(default_factory=dict)  # host directory → placeholder
    user_names: list[str] = field(default_factory=run_user_names)
    host_name: str | list[str] = field(default_factory=host_names)
    home: str = field(default_factory=lambda: str(Path.home()))
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Where each redaction was, as (file, line) → rules: what the audit reports.
    places: list[tuple[str, int, str]] = field(default_factory=list)
    # Keyed digests of names that must not appear (from a bundle's redactions.json).
    identity: dict[str, str] = field(default_factory=dict)  # digest → kind
    identity_salt: str = field(default_factory=lambda: random_secrets.token_hex(16))
    record_places: bool = False
    _ips: dict[str, str] = field(default_factory=dict)
    _clean: set[str] = field(default_factory=set)
    _redactions: int = 0  # every redaction so far (what `_value_text` compares)
    _indexed: tuple[str, _LineIndex] | None = None  # the last text whose lines were indexed

    @property
    def hosts(self) -> list[str]:
        return [self.host_name] if isinstance(self.host_name, str) else list(self.host_name)

    @cached_property
    def _literals(self) -> list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]]:
        """Rules made from this run: its paths, users and host names."""
        rules: list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]] = []
        for root, placeholder in sorted(self.path_roots.items(), key=lambda item: -len(item[0])):
            if root.rstrip("/"):  # "/" (a run started from the root directory) is no host detail
                rules.append(
                    ("host_path", re.compile(re.escape(root.rstrip("/")) + r"(?=/|\b)"), lambda m, p=placeholder: p)
                )
        if self.home not in ("/", "") and self.home not in self.path_roots:
            rules.append(("home_directory", re.compile(re.escape(self.home) + r"(?=/|\b)"), lambda m: "~"))
        rules.append(("host_path", HOME_PATH, lambda m: PLACEHOLDER.format("host_path")))
        users = [re.escape(name) for name in self.user_names if name]
        if users:
            site = "|".join(SITE_ROOTS)
            rules.append(
                (
                    "host_path",
                    re.compile(rf"(?<![\w.])/(?:{site})/(?:{'|'.join(users)})(?![\w-])[^\s\"'<>|:,;)\]}}]*+"),
                    lambda m: PLACEHOLDER.format("host_path"),
                )
            )
            rules.append(
                (
                    "host_user",
                    re.compile(rf"(?<![\w-])(?:{'|'.join(users)})(?![\w-])"),
                    lambda m: PLACEHOLDER.format("host_user"),
                )
            )
        hosts = sorted((re.escape(h) for h in self.hosts if len(h) >= 3), key=len, reverse=True)
        if hosts:
            pattern = re.compile(rf"(?i)(?<![\w-])(?:{'|'.join(hosts)})(?![\w-])")
            rules.append(("host_name", pattern, lambda m: PLACEHOLDER.format("host_name")))
        return rules

    def identity_record(self) -> dict[str, Any]:
        """For redactions.json: keyed digests of this run's user and host names."""
        entries = [("user", name) for name in self.user_names] + [("host", name) for name in self.hosts]
        return {
            "salt": self.identity_salt,
            "digests": sorted({identity_digest(self.identity_salt, name): kind for kind, name in entries}.items()),
        }

    # ---- text ----------------------------------------------------------------------------
    def _note(self, rule: str, where: str, text: str = "", offset: int = 0) -> None:
        """Count one redaction and, for the audit, where it was (line 0: a JSON value, whose
        line the JSONL reader fills in). Lines are indexed only when a place is recorded."""
        self.counts[(rule, where)] += 1
        self._redactions += 1
        if self.record_places:
            line = 0
            if text:
                if self._indexed is None or self._indexed[0] is not text:
                    self._indexed = (text, _LineIndex(text))
                line = self._indexed[1].line(offset)
            self.places.append((where, line, rule))

    def text(self, text: str, where: str) -> str:
        text = redact_secrets(text, lambda rule, offset, current: self._note(rule, where, current, offset))
        for rule, pattern, replace in self._literals:
            text = self._sub(text, pattern, replace, rule, where)
        text = self._sub(text, PRIVATE_IP, self._ip, "private_ip", where)
        text = self._sub(text, PRIVATE_IPV6, self._ip, "private_ip", where)
        if "ip-" in text:
            text = self._sub(text, CLOUD_HOST, lambda m: PLACEHOLDER.format("cloud_host"), "cloud_host", where)
        if ".internal" in text.lower():
            text = self._internal_names(text, where)
        if self.identity:
            text = self._sub(text, WORD_TOKEN, self._identity_token, "host_identity", where, keep_unchanged=True)
        return text

    def _sub(
        self,
        text: str,
        pattern: re.Pattern[str],
        replace: Callable[[re.Match[str]], str],
        rule: str,
        where: str,
        keep_unchanged: bool = False,
    ) -> str:
        def counted(match: re.Match[str]) -> str:
            new = replace(match)
            if new != match.group(0) or not keep_unchanged:
                self._note(rule, where, text, match.start())
            return new

        return pattern.sub(counted, text)

    def _internal_names(self, text: str, where: str) -> str:
        out, position = [], 0
        for suffix in INTERNAL_SUFFIX.finditer(text):
            if suffix.start() < position:
                continue
            window_start = max(position, suffix.start() - 640)
            name = INTERNAL_NAME.search(text, window_start, suffix.start())
            if name is None:
                continue
            self._note("cloud_host", where, text, name.start())
            out += [text[position : name.start()], PLACEHOLDER.format("cloud_host")]
            position = suffix.end()
        if not out:
            return text
        out.append(text[position:])
        return "".join(out)

    def _identity_token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        for candidate in {token, token.rstrip("."), token.split(".")[0]}:
            if identity_digest(self.identity_salt, candidate) in self.identity:
                return PLACEHOLDER.format("host_identity")
        return token

    def _ip(self, match: re.Match[str]) -> str:
        return self._ips.setdefault(match.group(0), f"private-ip-{len(self._ips) + 1}")

    # ---- structure -----------------------------------------------------------------------
    def value(self, value: Any, where: str) -> Any:
        """A JSON value, sanitized value by value; a key named like a secret redacts its value."""
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                new_key = self._value_text(key, where) if isinstance(key, str) else key
                if isinstance(key, str) and is_secret_name(key) and _is_scalar(item) and not _redacted(item):
                    self._note("secret_name", where)
                    out[new_key] = PLACEHOLDER.format("secret_name")
                else:
                    out[new_key] = self.value(item, where)
            return out
        if isinstance(value, list):
            return [self.value(item, where) for item in value]
        if isinstance(value, str):
            return self._value_text(value, where)
        return value

    def _value_text(self, value: str, where: str) -> str:
        """`text` for a JSON string, remembering strings that needed nothing: event logs
        repeat the same few values (kinds, sources, outcomes) tens of thousands of times."""
        if value in self._clean:
            return value
        before = self._redactions
        new = self.text(value, where)
        if new == value and self._redactions == before and len(self._clean) < 200_000:
            self._clean.add(value)
        return new

    def json_text(self, text: str, where: str) -> str:
        """A JSON document: parsed, sanitized, re-encoded (falls back to text if it is not JSON)."""
        try:
            document = json.loads(text)
        except ValueError:
            return self.text(text, where)
        return json.dumps(self.value(document, where), indent=2) + "\n"

    def jsonl_text(self, text: str, where: str) -> str:
        """JSON lines: each line that is JSON is sanitized as JSON, any other as text."""
        out = []
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                out.append(line)
                continue
            try:
                record = json.loads(line)
            except ValueError:
                out.append(self.text(line, where))
                continue
            before = len(self.places)
            out.append(json.dumps(self.value(record, where), separators=(",", ":")))
            self.places[before:] = [(w, number, r) for w, _, r in self.places[before:]]
        return "\n".join(out)

    def file_text(self, text: str, where: str) -> str:
        """By the file's kind: JSON, JSON lines, or text."""
        if where.endswith(".json"):
            return self.json_text(text, where)
        if where.endswith(".jsonl"):
            return self.jsonl_text(text, where)
        return self.text(text, where)

    def report(self) -> dict[str, object]:
        """For redactions.json: counts per rule and file, never the text."""
        by_rule: Counter[str] = Counter()
        for (rule, _), count in self.counts.items():
            by_rule[rule] += count
        # Lists of {rule, count}: a rule's name as a key (`secret_name: 3`) would itself read
        # as a secret's name to the audit.
        return {
            "by_rule": [{"rule": rule, "count": count} for rule, count in sorted(by_rule.items())],
            "by_file": [
                {"file": where, "rule": rule, "count": count} for (rule, where), count in sorted(self.counts.items())
            ],
            "host_identity": self.identity_record(),
        }


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _redacted(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith(REDACTED_PREFIX) or value == "")


class _LineIndex:
    """Offset → line number, by bisecting the newline offsets (built once per text, at its
    first recorded redaction: most texts have none)."""

    def __init__(self, text: str) -> None:
        self._newlines = [match.start() for match in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1


def sanitizer_for_audit(identity: dict[str, Any] | None, base: Sanitizer | None = None) -> Sanitizer:
    """The audit's sanitizer. For a bundle that recorded its run's identity, that identity
    (so the verdict does not depend on the auditor's machine), plus the run's own paths and
    names when the run itself audits (`base`); for anything else, this machine's run."""
    base = base if base is not None else (None if identity else Sanitizer())
    recorded = {digest: kind for digest, kind in (identity or {}).get("digests", [])}
    return Sanitizer(
        path_roots=base.path_roots if base else {},
        user_names=base.user_names if base else [],
        host_name=base.hosts if base else [],
        home=base.home if base else "",
        identity=recorded,
        identity_salt=str((identity or {}).get("salt", "")) or (base.identity_salt if base else ""),
        record_places=True,
    )
