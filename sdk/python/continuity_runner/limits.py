"""The sizes contract v1 bounds (its Limits table) that a runner's messages must keep to.

A runner that sends more gets its event dead-lettered or its request refused; the SDK checks
an event before publishing it, and cuts an archive answer's output, so neither happens silently.
"""

from __future__ import annotations

KIB = 1024

MAX_EVENT_BYTES = 64 * KIB
"""An encoded event on `continuity.events.>`."""
MAX_REQUEST_BYTES = 64 * KIB
"""An encoded request body, and an answer to an archive request."""
MAX_ATTEMPT = 1000
MAX_SAFE_INT = 2**53 - 1
"""`epoch`, `expected_revision`, `exit_code`: exact in every runner's number type."""

# Characters per free-text field (a TOKEN is bounded by its pattern: 128).
NAME_CHARS = 256
SIGNATURE_CHARS = 128
COMMAND_CHARS = 1024
CURSOR_CHARS = 1024
MESSAGE_CHARS = 4096
PATH_CHARS = 4096
OUTPUT_CHARS = 8192
