"""What the console says to the person at the browser: a service's error codes and the
middleware's refusals in words, where a run's classification came from, and what a page says
when no service answered."""

from __future__ import annotations

MESSAGES = {
    "not_found": "No such run is known.",
    "execution_reconciliation_conflict": "This reconciliation was already resolved with another outcome.",
    "execution_reconciliation_already_delivered": (
        "This reconciliation was already resolved with this outcome; its decision was delivered."
    ),
    "reconciliation_required": (
        "This run waits on a reconciliation and cannot be retried: record what the pending tool call did."
    ),
    "run_not_stopped": "This run is not stopped for an operator, so there is nothing to retry.",
    "operator_retry_already_delivered": "A fresh continuation was already delivered for this attempt.",
    "run_changed": "The run changed while the request was handled; look at it again and retry.",
    "unavailable": "A service's store is unavailable; retry in a moment.",
    "internal_error": "A service failed on this request; see its logs.",
    "invalid_replay": "The reconciliation service refused this replay's filters.",
    "invalid_preview": "The session-store refused this preview's fields.",
    "invalid_stats": "The reconciliation service refused these filters.",
}
"""What an error code of a service means for the person who pressed the button."""
REFUSALS = {
    "untrusted_proxy": "The identity header came from an address that is not a trusted proxy.",
    "duplicated_header": "The request carries the identity or X-Forwarded-For header more than once.",
    "invalid_forwarded_for": "The proxy's X-Forwarded-For header does not name an address.",
    "invalid_identity": "The signed-in identity is not a valid name.",
    "origin_mismatch": "The form did not come from this console.",
    "csrf_invalid": "The form's anti-forgery token is missing or wrong: reload the page and try again.",
    "not_signed_in": "Sign in first.",
    "bad_token": "That token is not valid.",
}
"""Why the middleware (or the login form) refused a request, by `identity.Refused.reason`."""
CLASS_SOURCES = {
    "command_result": "a signed command result",
    "error_code": "the error's code",
    "none": "nothing the runner reported",
}
"""Where a run's classification came from, as its page says it."""
NO_ANSWER = "No service answered; retry in a moment."
