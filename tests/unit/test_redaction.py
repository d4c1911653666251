"""Redaction of runner output (contract section 5): one test per pattern, and properties."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.contract.redaction import ARCHIVE_FAILED, REDACTED, bounded_detail, redact

SECRET = "s3cr3tV4lue9"

PREFIXES = ["sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xoxb-", "xoxp-"]
KEY_WORDS = [
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "cookie",
    "credential",
    "password",
    "passwd",
    "secret",
    "token",
    "private_key",
]
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def test_pem_private_key_block() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nq9Zx\n-----END RSA PRIVATE KEY-----"
    out = redact(f"before\n{pem}\nafter")
    assert out == f"before\n{REDACTED}\nafter"


def test_pem_block_without_its_end_is_hidden_to_the_end() -> None:
    assert redact("key: \n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk").endswith(REDACTED)
    assert "b3BlbnNzaC1rZXk" not in redact("-----BEGIN PRIVATE KEY-----\nb3BlbnNzaC1rZXk")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_token_prefixes(prefix: str) -> None:
    assert redact(f"using {prefix}{SECRET} now") == f"using {REDACTED} now"


def test_a_prefix_inside_a_word_is_not_a_token() -> None:
    assert redact("task-list mask-on desk-top") == "task-list mask-on desk-top"


def test_jwt() -> None:
    assert redact(f"got {JWT} back") == f"got {REDACTED} back"
    # A JWT cut after its payload still is one.
    assert redact(JWT.rsplit(".", 1)[0]) == REDACTED


@pytest.mark.parametrize("word", ["Bearer", "bearer", "BEARER"])
def test_bearer_value(word: str) -> None:
    assert redact(f"sent {word} {SECRET} to the api") == f"sent {word} {REDACTED} to the api"


@pytest.mark.parametrize("word", KEY_WORDS)
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title])
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{k}={v}", "{k}=" + REDACTED),
        ("{k}: {v}", "{k}: " + REDACTED),
        ('"{k}": "{v}"', '"{k}": "' + REDACTED + '"'),
        ("X_{k}_FILE = {v}", "X_{k}_FILE = " + REDACTED),
        ('{{\\"{k}\\": \\"{v}\\"}}', '{{\\"{k}\\": \\"' + REDACTED + '\\"}}'),
        ("{k}='{v} with spaces'", "{k}='" + REDACTED + "'"),
    ],
)
def test_key_value_forms(word: str, case: Callable[[str], str], template: str, expected: str) -> None:
    key = case(word)
    if word == "cookie" and template == "{k}: {v}":
        expected = "{k}: " + REDACTED  # a cookie header hides its whole line
    out = redact(template.format(k=key, v=SECRET))
    assert SECRET not in out
    assert out == expected.format(k=key)


def test_authorization_header_with_scheme() -> None:
    assert redact("Authorization: Basic dXNlcjpwYXNz") == f"Authorization: Basic {REDACTED}"
    assert redact("authorization: Bearer abc.def") == f"authorization: Bearer {REDACTED}"


def test_cookie_header_hides_every_pair() -> None:
    out = redact("Cookie: theme=dark; sid=abc123\nnext")
    assert out == f"Cookie: {REDACTED}\nnext"


def test_unterminated_quoted_value() -> None:
    assert redact('password="half of it') == f'password="{REDACTED}'


def test_ordinary_text_is_unchanged() -> None:
    text = "mv /state/ns-1 /archive/ns-1: No such file or directory (exit 1), retry=3 user: bob"
    assert redact(text) == text


def test_redaction_is_idempotent() -> None:
    once = redact(f"token={SECRET} Bearer {SECRET} {JWT} sk-{SECRET}")
    assert redact(once) == once


def test_bounded_detail_format() -> None:
    assert bounded_detail(ARCHIVE_FAILED, 1, False, "disk full") == (
        "runner_continuity_break_archive_failed: exit=1 timedOut=false disk full"
    )
    assert bounded_detail(ARCHIVE_FAILED, None, True, "") == (
        "runner_continuity_break_archive_failed: exit=null timedOut=true"
    )


def test_bounded_detail_redacts_before_cutting() -> None:
    # The secret straddles the cut: redacting only the kept part would show its first half.
    head = bounded_detail(ARCHIVE_FAILED, 1, False, "")
    filler = "x" * (512 - len(head) - len(" password=") - 4)
    out = bounded_detail(ARCHIVE_FAILED, 1, False, f"{filler} password={SECRET}")
    assert len(out) == 512
    assert SECRET[:4] not in out.rsplit("password=", 1)[1]


# --- properties -------------------------------------------------------------------------

_secret_values = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
    min_size=8,
    max_size=40,
)
_filler = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ0123456789.,:/()!?\n", min_size=0, max_size=80
)
_TRIGGERS = (
    [w.lower() for w in KEY_WORDS]
    + [p.lower() for p in PREFIXES]
    + [
        "bearer",
        "eyj",
        "private key",
        "-----begin",
    ]
)


def _embed(kind: str, secret: str, word: str, prefix: str) -> str:
    if kind == "prefix":
        return prefix + secret
    if kind == "bearer":
        return f"Bearer {secret}"
    if kind == "jwt":
        return f"eyJ{secret}.eyJ{secret[::-1]}.{secret}"
    if kind == "pem":
        return f"-----BEGIN EC PRIVATE KEY-----\n{secret}\n{secret}\n-----END EC PRIVATE KEY-----"
    if kind == "eq":
        return f"{word}={secret}"
    if kind == "colon":
        return f"{word}: {secret}"
    return f'"{word}": "{secret}"'


@settings(max_examples=300, deadline=None)
@given(
    before=_filler,
    after=_filler,
    secret=_secret_values,
    kind=st.sampled_from(["prefix", "bearer", "jwt", "pem", "eq", "colon", "json"]),
    word=st.sampled_from(KEY_WORDS).flatmap(lambda w: st.sampled_from([w, w.upper(), f"my_{w}_v2"])),
    prefix=st.sampled_from(PREFIXES),
)
def test_no_generated_secret_survives(
    before: str, after: str, secret: str, kind: str, word: str, prefix: str
) -> None:
    assume(secret not in before and secret not in after and secret not in REDACTED)
    text = f"{before} {_embed(kind, secret, word, prefix)} {after}"
    assert secret not in redact(text)
    detail = bounded_detail(ARCHIVE_FAILED, 1, False, text)
    # The detail's fixed head is the service's own text: a "secret" that is part of it (such as
    # `continui`) says nothing of what the runner's output left in.
    assert secret not in detail.removeprefix(f"{ARCHIVE_FAILED}: exit=1 timedOut=false ")
    assert len(detail) <= 512


@settings(max_examples=200, deadline=None)
@given(output=st.text(max_size=2000), exit_code=st.none() | st.integers(-255, 255), timed_out=st.booleans())
def test_detail_never_exceeds_the_bound(output: str, exit_code: int | None, timed_out: bool) -> None:
    detail = bounded_detail(ARCHIVE_FAILED, exit_code, timed_out, output)
    assert len(detail) <= 512
    expected_head = f"{ARCHIVE_FAILED}: exit={'null' if exit_code is None else exit_code} "
    assert detail.startswith(expected_head)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_text_without_secrets_passes_unchanged(text: str) -> None:
    lowered = text.lower()
    assume(not any(t in lowered for t in _TRIGGERS))
    assert redact(text) == text
