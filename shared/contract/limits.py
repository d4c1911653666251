"""Every size the wire contract bounds, in one place (docs/contract-v1.md, "Limits").

Runners are untrusted and may send anything of any size; each bound below is far above what a
well-behaved runner sends and far below what would hurt a service, a stream or a reply. The
byte limits apply to the encoded message; the character limits (Unicode code points) to one
field. A message within every field limit can still exceed its byte limit (text made mostly of
escapes); the byte limit is checked first.
"""

from __future__ import annotations

KIB = 1024

MAX_EVENT_BYTES = 64 * KIB
"""An event on `continuity.events.>`, or a work item: one with every field at its limit, in
ASCII, is under 10 KiB, and 64 KiB keeps a stream of them, and its dead letters, cheap."""

MAX_REQUEST_BYTES = 64 * KIB
"""A request body, and a runner's answer to an archive request (the same size as an event:
the largest request, a commit with a 4096-character `cwd`, is well below it)."""

MAX_PAGE_BYTES = 512 * KIB
"""A page of `continuity.reconciliations.list`: half of NATS' default 1 MiB payload limit,
so a reply with its headers always fits."""

MAX_DEPTH = 32
"""JSON nesting (objects and arrays), anywhere in a message, unknown fields included: the
contract's messages nest at most 4 deep; deeper input only costs stack."""

MAX_ATTEMPT = 1000
"""`attempt`: the budget is 3; 1000 leaves room for any future budget and stays exact in every
runner's number type."""

MAX_SAFE_INT = 2**53 - 1
"""Every other integer (`epoch`, `expected_revision`, `exit_code`): the largest that a
JavaScript or a float-decoding runner reads exactly."""

# Characters per free-text field (a TOKEN is bounded by its pattern: 128).
NAME_CHARS = 256
"""Identifier-like text: `tool_name`, `error.type`, `error.code`,
`command_result.status`, `command_result.classification`, `adapter`, `model`, `prompt_hash`
(a hex SHA-512 with a prefix fits), `decision_id`."""

SIGNATURE_CHARS = 128
"""`command_result.signature`: a hex HMAC-SHA256 is 64."""

COMMAND_CHARS = 1024
"""`command_result.command`: a command name or a short command line."""

CURSOR_CHARS = 1024
"""`cursor`, `latest_cursor`, and the list's `cursor`: opaque tokens."""

MESSAGE_CHARS = 4096
"""`error.message`: kept for the runner's own logs, never read by Continuity."""

PATH_CHARS = 4096
"""`cwd`: Linux' PATH_MAX."""

EVIDENCE_CHARS = 2000
"""`evidence` of a resolution (section 6 of the contract)."""

OUTPUT_CHARS = 8192
"""`output` of a runner's archive answer: only its first 512 characters, redacted, reach the
decision's detail; 8192 six-byte escapes (`\\u0001`) still fit in `MAX_REQUEST_BYTES`."""

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
