"""What counts as a secret in evidence text, and how each form is found.

Three kinds of evidence: a value whose *name* says it is a secret (`DB_PASSWORD=…`,
`"x-api-key": …`, `--api-key …`, `?token=…`), a value whose *shape* is a known credential
(`sk-…`, `ghp_…`, a PEM private key), and a credential in a known *position* (`https://u:p@`,
`curl -u u:p`, `Bearer …`). Names are judged by their words, not by a substring, so
`MAX_TOKENS`, `KEYBOARD` and `proxy-read-timeout` are kept while `aws_secret_access_key` and
`X-Auth-Token` are not.

Every pattern here runs in time linear in its input: no pattern can fail after scanning far
ahead (quoted values end at their quote or at the end of the line), and quantifiers are
possessive or bounded, so an adversarial megabyte takes as long as an ordinary one
(`benchmarks/evidence.py` measures it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

PLACEHOLDER = "[redacted:{}]"
REDACTED_PREFIX = "[redacted:"

# Words that make a name a secret's name, and words that make it something else (a count,
# a timeout, a file holding the secret rather than the secret). Compounds that people write
# as one word are listed whole.
SECRET_WORDS = frozenset(
    {
        "password", "passwd", "pwd", "passphrase", "secret", "token", "credential", "credentials",
        "auth", "authorization", "cookie", "key", "apikey", "accesstoken", "authtoken", "secretkey",
        "privatekey", "accountkey", "sessiontoken", "clientsecret", "refreshtoken", "idtoken", "pat",
    }
)  # fmt: skip
BENIGN_WORDS = frozenset(
    {
        "tokens", "timeout", "keyboard", "keys", "keyspace", "max", "num", "count", "limit", "size",
        "len", "length", "file", "path", "dir", "type", "kind", "mode", "format", "id", "name", "url",
        "uri", "endpoint", "ttl", "expiry", "expires", "age", "prefix", "header", "policy", "algorithm",
        "alg", "field", "budget", "usage", "per", "exempt", "threshold", "min", "env", "tokenizer",
        "required", "enabled", "disabled", "method", "scheme", "provider", "version", "ref", "hint",
    }
)  # fmt: skip
# Secret only in a URL's query: a signed URL's signature, an OAuth code. Elsewhere `sig` is,
# for one, the DSSE envelope's own signature, which is evidence and not a secret.
QUERY_ONLY_WORDS = frozenset({"sig", "signature", "code", "x-amz-signature", "x-goog-signature"})
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def name_words(name: str) -> list[str]:
    """`aws_secret_access_key` → aws, secret, access, key; `XAuthToken` → x, auth, token."""
    return [word.lower() for part in re.split(r"[_\-.\s:/]+", name) for word in _WORD.findall(part)]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str, *, query: bool = False) -> bool:
    words = name_words(name)
    joined = "".join(words)
    if any(word in BENIGN_WORDS for word in words):
        return False
    if any(word in SECRET_WORDS for word in words) or joined in SECRET_WORDS:
        return True
    return query and (joined in QUERY_ONLY_WORDS or name.lower() in QUERY_ONLY_WORDS)


@dataclass(frozen=True, slots=True)
class Shape:
    """A credential recognised by its shape alone."""

    name: str
    pattern: re.Pattern[str]
    hint: str  # lower-case literal every match contains: the regex runs only where it occurs


SHAPES: tuple[Shape, ...] = (
    Shape("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"), "eyj"),
    Shape("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}+"), "sk-"),
    Shape("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}+"), "k_"),
    Shape("ngc_key", re.compile(r"\bnvapi-[A-Za-z0-9_-]{16,}+"), "nvapi-"),
    Shape("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{20,}+"), "hf_"),
    Shape("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "a"),
    Shape("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}+|github_pat_[A-Za-z0-9_]{40,}+)"), "g"),
    Shape("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}+"), "glpat-"),
    Shape("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}+"), "xox"),
    Shape("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), "aiza"),
    Shape("pypi_token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}+"), "pypi-"),
    Shape("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b"), "sg."),
    Shape("twilio_key", re.compile(r"\b(?:AC|SK)[a-f0-9]{32}\b"), "c"),
)

# name=value, name: value, "name": "value", 'name': 'value', \"name\": \"value\" (JSON in a
# log line). Only the name and separator are matched; the value is read by VALUE from there.
# A name can only be a secret's if it holds one of these (checked in C, before Python judges
# the words): most `name=value` pairs in a log never reach the judge.
_CANDIDATE = r"(?=[A-Za-z0-9_.\-]{0,127}?(?i:pass|pwd|secret|token|cred|auth|cookie|key|pat|sig|code))"
ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9_.\-]){_CANDIDATE}([A-Za-z_][A-Za-z0-9_.\-]{{0,127}}+)(\\?[\"']?[ \t]*[:=][ \t]*)"
)
# --name value, --name=value
CLI_FLAG = re.compile(rf"(?<![\w-])--{_CANDIDATE}([A-Za-z][A-Za-z0-9-]{{0,63}}+)(=|[ \t]++)")
# ?name=value, &name=value, ;name=value
QUERY = re.compile(rf"([?&;]){_CANDIDATE}([A-Za-z0-9_.\-]{{1,64}}+)=")
# A value: quoted (a closing quote, or the end of the line: never fails after it started),
# bracketed (a list, a dict, a tuple: to its first closing bracket, or the line's end, so a
# value that starts with `[` is never cut to its bracket), or a bare run. Whatever starts
# with a scheme word (`Bearer …`) keeps its credential.
VALUE = re.compile(
    r"\\\"[^\"\n]*+(?:\"|$)"  # \"…\" (JSON-encoded quotes)
    r"|\"(?:[^\"\\\n]|\\.)*+(?:\"|$)"  # "…" with escapes
    r"|'[^'\n]*+(?:'|$)"  # '…'
    r"|\[[^\]\n]*+(?:\]|$)|\{[^}\n]*+(?:\}|$)|\([^)\n]*+(?:\)|$)"  # [...], {...}, (...)
    r"|(?:Bearer|Basic|Token|Digest)[ \t]++[^\s\"',;}\]]++"  # a scheme and its credential
    r"|[^\s\"',;}\]&#]++",
    re.M | re.I,
)
URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]{1,15}+://)([^/\s:@'\"<>]{1,256}+):([^/\s@'\"<>]{1,256}+)@")
CURL_USER = re.compile(r"(?<![\w-])(-u|--user)([ \t]++|=)([^\s:'\"]{1,256}+:[^\s'\"]{1,256}+)")
BEARER = re.compile(r"\b(Bearer|Basic)([ \t]++)([A-Za-z0-9._~+/=\-]{8,}+)")
PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
PEM_BODY_LINE = re.compile(r"[ \t]*+[A-Za-z0-9+/=]{16,}+[ \t]*+|[ \t]*+(?:Proc-Type|DEK-Info|Version|Comment):[^\n]*+")


def _not_a_credential(value: str) -> bool:
    """Prose after `Bearer` (`Bearer authentication`, `Bearer slurm_proxy_request`) is not a
    credential (a real one has digits or capitals), nor is an
    assignment that happens to follow it (`token_type=Bearer MAX_TOKENS=4096`): a token's
    `=` is base64 padding, only ever at its end."""
    letters = value.replace("-", "").replace("_", "")
    if letters.isalpha() and (value.islower() or value[1:].islower()):  # a word or an identifier
        return True
    return "=" in value.rstrip("=")


Redact = Callable[[str, int, str], None]  # told (rule, offset, the text the offset is in) of each redaction


def _splice(text: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str | None]) -> str:
    """`pattern.sub`, but `replace` may return None to keep the match (and scanning resumes
    after it either way): one pass, linear."""
    out, position = [], 0
    for match in pattern.finditer(text):
        new = replace(match)
        if new is not None:
            out += [text[position : match.start()], new]
            position = match.end()
    if not out:
        return text
    out.append(text[position:])
    return "".join(out)


def _named_values(
    text: str, pattern: re.Pattern[str], name_group: int, judge: Callable[[str], bool], redact: Redact
) -> str:
    """Redact the value after each name the judge calls a secret's (ASSIGNMENT, CLI_FLAG,
    QUERY): the name and separator stay, so the evidence still says *what* was set."""
    out, position, search_from = [], 0, 0
    while True:
        match = pattern.search(text, search_from)
        if match is None:
            break
        search_from = match.end()
        if not judge(match.group(name_group)):
            continue
        value = VALUE.match(text, match.end())
        if value is None or value.end() == match.end():
            continue
        raw = value.group(0)
        if REDACTED_PREFIX in raw[:48]:  # already redacted by a rule that knew its shape
            search_from = value.end()
            continue
        opening = next((q for q in ('\\"', '"', "'") if raw.startswith(q)), "")
        closing = opening if opening and len(raw) > len(opening) and raw.endswith(opening[-1]) else ""
        redact("secret_name", value.start(), text)
        out += [text[position : value.start()], opening, PLACEHOLDER.format("secret_name"), closing]
        position = search_from = value.end()
    if not out:
        return text
    out.append(text[position:])
    return "".join(out)


def _pem(text: str, redact: Redact) -> str:
    """Private key blocks, whole or cut in half (an output tail often keeps only the END
    half, a head only the BEGIN half): line by line, so it stays linear."""
    if "PRIVATE KEY" not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    inside = False
    offset = 0
    for line in lines:  # every line keeps its place (emptied, not removed): line numbers hold
        begin, end = PEM_BEGIN.search(line), PEM_END.search(line)
        if begin and (not end or end.start() < begin.start()):  # a block opens on this line
            redact("private_key", offset + begin.start(), text)
            out.append(line[: begin.start()] + PLACEHOLDER.format("private_key"))
            inside = True
        elif begin and end:  # BEGIN … END on one line (escaped newlines)
            redact("private_key", offset + begin.start(), text)
            out.append(line[: begin.start()] + PLACEHOLDER.format("private_key") + line[end.end() :])
        elif inside:
            inside = end is None
            out.append("" if end is None else line[end.end() :])
        elif end:  # the END half only: the body lines just before it go too
            back = len(out) - 1
            while back >= 0 and PEM_BODY_LINE.fullmatch(out[back]):
                out[back] = ""
                back -= 1
            redact("private_key", offset + end.start(), text)
            out.append(PLACEHOLDER.format("private_key") + line[end.end() :])
        else:
            out.append(line)
        offset += len(line) + 1
    return "\n".join(out)


def redact_secrets(text: str, redact: Redact) -> str:
    """Every secret form in `text`, replaced by a placeholder naming its rule."""
    text = _pem(text, redact)
    lowered = text.lower()
    for shape in SHAPES:
        if shape.hint in lowered:
            text = _splice(text, shape.pattern, _whole(shape.name, redact))
    if "://" in text:
        text = _splice(text, URL_CREDENTIALS, _url_credentials(redact))
    if "-u" in text or "--user" in text:
        text = _splice(text, CURL_USER, _keep_flag("curl_user", redact))
    if "earer" in text or "asic" in text:
        text = _splice(text, BEARER, _bearer(redact))
    if "--" in text:
        text = _named_values(text, CLI_FLAG, 1, is_secret_name, redact)
    if "=" in text:
        text = _named_values(text, QUERY, 2, lambda name: is_secret_name(name, query=True), redact)
    if "=" in text or ":" in text:
        text = _named_values(text, ASSIGNMENT, 1, is_secret_name, redact)
    return text


def _whole(rule: str, redact: Redact) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        redact(rule, match.start(), match.string)
        return PLACEHOLDER.format(rule)

    return replace


def _url_credentials(redact: Redact) -> Callable[[re.Match[str]], str | None]:
    def replace(match: re.Match[str]) -> str | None:
        if match.group(3).startswith(REDACTED_PREFIX[1:]):
            return None
        redact("url_credentials", match.start(), match.string)
        return f"{match.group(1)}{PLACEHOLDER.format('url_credentials')}@"

    return replace


def _keep_flag(rule: str, redact: Redact) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        redact(rule, match.start(), match.string)
        return f"{match.group(1)}{match.group(2)}{PLACEHOLDER.format(rule)}"

    return replace


def _bearer(redact: Redact) -> Callable[[re.Match[str]], str | None]:
    def replace(match: re.Match[str]) -> str | None:
        if _not_a_credential(match.group(3)) or match.string.startswith(":", match.end()):
            return None
        redact("bearer_token", match.start(), match.string)
        return f"{match.group(1)}{match.group(2)}{PLACEHOLDER.format('bearer_token')}"

    return replace
