"""Every size the wire contract bounds, in one place (docs/contract-v1.md, "Limits").

Runners are untrusted and may send anything of any size; each bound below is far above what a
well-behaved runner sends and far below what would hurt a service, a stream or a reply. The
byte limits apply to the encoded message; the character limits (Unicode code points) to one
field. A message within every field limit can still exceed its byte limit (text made mostly of
escapes); the byte limit is checked first.
"""

from __future__ import annotations

# The bounds of what a runner sends have one home, the runner SDK's limits (docs/architecture.md,
# "One home for the contract"), named here with the services' own:
# - MAX_EVENT_BYTES: an event on `continuity.events.>`, or a work item: one with every field at
#   its limit, in ASCII, is under 10 KiB, and 64 KiB keeps a stream of them, and its dead
#   letters, cheap.
# - MAX_REQUEST_BYTES: a request body, and a runner's answer to an archive request (the largest
#   request, a commit with a 4096-character `cwd`, is well below it).
# - MAX_ATTEMPT: `attempt`: the budget is 3; 1000 leaves room for any future budget and stays
#   exact in every runner's number type.
# - MAX_SAFE_INT: every other integer (`epoch`, `expected_revision`, `exit_code`): the largest
#   that a JavaScript or a float-decoding runner reads exactly.
# - Characters per free-text field (a TOKEN is bounded by its pattern: 128): NAME_CHARS for
#   identifier-like text (`tool_name`, `error.type`, `error.code`, `command_result.status` and
#   `.classification`, `adapter`, `model`, `prompt_hash`, `decision_id`); SIGNATURE_CHARS (a hex
#   HMAC-SHA256 is 64); COMMAND_CHARS, a command name or a short command line; CURSOR_CHARS,
#   opaque tokens; MESSAGE_CHARS, `error.message`, never read by Continuity; PATH_CHARS, `cwd`
#   (Linux' PATH_MAX); OUTPUT_CHARS, a runner's archive answer, of which only the first 512
#   characters, redacted, reach the decision's detail (8192 six-byte escapes still fit in
#   MAX_REQUEST_BYTES).
from continuity_runner.limits import (
    COMMAND_CHARS,
    CURSOR_CHARS,
    KIB,
    MAX_ATTEMPT,
    MAX_EVENT_BYTES,
    MAX_REQUEST_BYTES,
    MAX_SAFE_INT,
    MESSAGE_CHARS,
    NAME_CHARS,
    OUTPUT_CHARS,
    PATH_CHARS,
    SIGNATURE_CHARS,
)

__all__ = [
    "ATTEMPT_BUDGET",
    "COMMAND_CHARS",
    "CURSOR_CHARS",
    "EVIDENCE_CHARS",
    "KIB",
    "MAX_ATTEMPT",
    "MAX_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_PAGE_BYTES",
    "MAX_REPLAY_REQUEST_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_SAFE_INT",
    "MESSAGE_CHARS",
    "MESSAGE_LIMITS",
    "NAME_CHARS",
    "OUTPUT_CHARS",
    "PATH_CHARS",
    "POLICY_MAX_BYTES",
    "REPLAY_MAX_RUNS",
    "REPLAY_MAX_SINCE_S",
    "SIGNATURE_CHARS",
]

MAX_PAGE_BYTES = 512 * KIB
"""A page of `continuity.reconciliations.list`: half of NATS' default 1 MiB payload limit,
so a reply with its headers always fits."""

MAX_DEPTH = 32
"""JSON nesting (objects and arrays), anywhere in a message, unknown fields included: the
contract's messages nest at most 4 deep; deeper input only costs stack."""

EVIDENCE_CHARS = 2000
"""`evidence` of a resolution (section 6 of the contract)."""

MESSAGE_LIMITS: dict[str, int] = {
    "event or work item": MAX_EVENT_BYTES,
    "request or archive answer": MAX_REQUEST_BYTES,
    "list page": MAX_PAGE_BYTES,
    "nesting depth": MAX_DEPTH,
}
"""The limits on a whole message, by the name the contract's Limits table gives them."""

ATTEMPT_BUDGET = 3
"""Bootstrap retries, exact resumes and replacements of one run share this many tries (4.1)."""

POLICY_MAX_BYTES = 64 * KIB
"""A decision policy's file (docs/policies.md)."""

MAX_REPLAY_REQUEST_BYTES = 2 * POLICY_MAX_BYTES + 4 * KIB
"""A replay request (operators only), which carries a policy file's text: JSON escapes at most
double a valid policy file's bytes (a quote, a backslash or a line break becomes two)."""

REPLAY_MAX_RUNS = 1_000_000
"""Runs one replay reads at most."""

REPLAY_MAX_SINCE_S = 400 * 86400.0
"""A replay's window: longer than any run retention."""
