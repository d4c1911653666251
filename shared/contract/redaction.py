"""Redaction of secrets in free text a runner sends back (contract section 5).

`redact` replaces with `[REDACTED]`: PEM private-key blocks; tokens with a known secret prefix;
JWT-shaped strings; the value after `Bearer `; and the value of any `key=value`, `key: value` or
`"key": "value"` whose key names a credential. It errs on the side of hiding too much.

Every pattern is also safe on a prefix of a secret (an unterminated PEM block, quoted value or
JWT still matches), and the patterns are anchored and possessive so that a long hostile output
costs linear time.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"
ARCHIVE_FAILED = "runner_continuity_break_archive_failed"
DETAIL_LIMIT = 512
SCAN_LIMIT = 64 * 1024
"""Output beyond this is dropped before redaction: it could never reach a 512-character detail,
and it bounds the work a hostile output can cause. Safe because every pattern also matches a
prefix of its secret."""

# Characters that end an unquoted secret: whitespace, quotes and list/pair separators.
_VALUE = r"[^\s\"'`,;&]++"

_PEM = re.compile(
    r"-----BEGIN[^\n-]{0,64}PRIVATE KEY-----.*?(?:-----END[^\n-]{0,64}PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_PREFIXED = re.compile(r"(?<![A-Za-z0-9])(?:sk-|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|xoxb-|xoxp-)" + _VALUE)
# Header, payload and (possibly empty) signature; a JWT's header always encodes `{"`, i.e. `eyJ`.
_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]*+(?:\.[A-Za-z0-9_-]*+){1,2}")
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer\s+)" + _VALUE)

_KEY_WORDS = (
    r"authorization|api_key|apikey|api-key|cookie|credential|password|passwd|secret|token|private_key"
)
# The lookbehind makes a key start where a word starts, and the possessive run after the
# lookahead never backtracks: each word is tried once.
_KEY_VALUE = re.compile(
    r"(?i)(?<![\w.\-])(?P<head>(?=[\w.\-]*?(?:" + _KEY_WORDS + r"))[\w.\-]++"
    r"(?:\\?[\"'])?[ \t]*+(?:=>|[:=])[ \t]*+)"
    r"(?P<value>"
    r"\\\"(?:(?!\\\")[^\n])*+(?:\\\")?"  # an escaped-quoted value inside a JSON string
    r"|\"(?:[^\"\\\n]|\\.)*+\"?"  # "value", also when cut before its closing quote
    r"|'[^'\n]*+'?"
    r"|(?:(?:bearer|basic|digest|token|negotiate)[ \t]++)?" + _VALUE + r")"
)
# A cookie header carries several `name=value` pairs: hide the whole line.
_COOKIE_HEADER = re.compile(r"(?im)^(?P<head>[ \t]*(?:set-)?cookie[ \t]*:[ \t]*)[^\r\n]+")


def _redact_pair(match: re.Match[str]) -> str:
    value = match.group("value")
    for quote in ('\\"', '"', "'"):
        if value.startswith(quote):
            return (
                match.group("head")
                + quote
                + REDACTED
                + (quote if value.endswith(quote) and len(value) > len(quote) else "")
            )
    scheme = re.match(r"(?i)(?:bearer|basic|digest|token|negotiate)[ \t]+", value)
    return match.group("head") + (scheme.group(0) if scheme else "") + REDACTED


def redact(text: str) -> str:
    """Replace every secret in `text` with `[REDACTED]`; other text is left as it was."""
    text = _PEM.sub(REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    text = _PREFIXED.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _COOKIE_HEADER.sub(lambda m: m.group("head") + REDACTED, text)
    return _KEY_VALUE.sub(_redact_pair, text)


def bounded_detail(
    code: str, exit_code: int | None, timed_out: bool, output: str, limit: int = DETAIL_LIMIT
) -> str:
    """`<code>: exit=<code or null> timedOut=<true|false> <output>`, redacted, then cut to `limit`.

    The whole text is redacted before it is cut, so a cut can only shorten a `[REDACTED]`
    marker, never reveal part of a secret. An empty output leaves no trailing space.
    """
    exit_text = "null" if exit_code is None else str(exit_code)
    head = f"{code}: exit={exit_text} timedOut={'true' if timed_out else 'false'}"
    output = output[:SCAN_LIMIT]
    full = f"{head} {output}" if output else head
    return redact(full)[:limit]
