"""The remote move: ask the runner, on `continuity.runner.<runner_id>.archive`, to move its
saved continuity state aside (contract section 5, step 1).

Every answer, or its absence, becomes an `Answer`, and then a `MoveResult` whose detail hides
the session's generation values (see `scrub`); only a NATS failure that is neither a timeout
nor "no responders" propagates (the caller's redelivery handles it).

- No answer within `archive_timeout_s`: `timed_out=true`, `exit_code=null`.
- No responders (no runner subscribed): a failed move, `exit_code=null`, `timed_out=false`.
  NATS says so at once, and it proves the move was not performed, so it is not a timeout; it
  is not transient either: the runner, not the control plane, is missing, which is a decision
  (retry later, or an operator once the attempt budget is spent).
- An error reply, or an answer that does not decode within the contract's limits: a failed move,
  `exit_code=null`.
- Success needs `exit_code == 0` and `timed_out` false.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import msgspec
import nats.errors
from nats.aio.client import Client

from shared.contract import subjects
from shared.contract.archive import ArchiveCommand, ArchiveResult
from shared.contract.decisions import ArchiveWork
from shared.contract.decoding import InvalidInput, decode
from shared.contract.redaction import ARCHIVE_FAILED, bounded_detail
from shared.platform import tracing

from .scrub import scrub
from .step import MoveResult

NO_RESPONDERS = "no runner answers on its archive subject (no responders); nothing was moved"
BAD_ANSWER = "the runner's answer is not an archive result"
UNKNOWN_RESULT = (
    "result unknown: the archiver stopped while waiting for the runner's answer; the move is not sent twice"
)

_encode = msgspec.json.Encoder().encode
_result_decoder = msgspec.json.Decoder(ArchiveResult)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the runner said (or what its silence means), before anything is hidden."""

    exit_code: int | None
    timed_out: bool
    output: str

    def result(self, generations: Collection[str] = ()) -> MoveResult:
        return result(self.exit_code, self.timed_out, self.output, generations)


def result(
    exit_code: int | None, timed_out: bool, output: str, generations: Collection[str] = ()
) -> MoveResult:
    """A move's result; the detail of a failure has `generations` hidden, is redacted, then cut
    to 512 characters (hiding first, so that neither step can leave part of a value)."""
    ok = exit_code == 0 and not timed_out
    return MoveResult(
        exit_code=exit_code,
        timed_out=timed_out,
        detail="" if ok else bounded_detail(ARCHIVE_FAILED, exit_code, timed_out, scrub(output, generations)),
    )


def unknown() -> MoveResult:
    """A move that was sent but whose answer was lost with the archiver that sent it.

    It is not sent again (at most one remote move per archive_id). It counts as a timeout,
    which is what it was from the control plane's side: the local record stays untouched and
    the decision is the archive-failed retry, or an operator once the budget is spent. The
    runner may have moved its state aside meanwhile; the detail says the result is unknown so
    that an operator knows to look.
    """
    return result(None, True, UNKNOWN_RESULT)


async def ask(nc: Client, work: ArchiveWork, timeout_s: float) -> Answer:
    command = ArchiveCommand(
        archive_id=work.archive_id,
        run_id=work.run_id,
        session=work.session,
        native_session_id=work.native_session_id,
    )
    with tracing.span("continuity-archiver runner archive", kind="client", run_id=work.run_id):
        try:
            reply = await nc.request(
                subjects.runner_archive(work.runner_id),
                _encode(command),
                timeout=timeout_s,
                headers=tracing.headers(tracing.current()) or None,  # the runner continues the trace
            )
        except nats.errors.NoRespondersError:
            tracing.annotate(outcome="no_responders")
            return Answer(None, False, NO_RESPONDERS)
        except TimeoutError:
            tracing.annotate(outcome="timed_out")
            return Answer(None, True, "")
    headers = reply.headers or {}
    if headers.get("Nats-Service-Error-Code"):
        # The runner's own error text is hidden and redacted with the rest of the detail.
        code = headers.get("Nats-Service-Error-Code")
        return Answer(None, False, f"runner error {code}: {reply.data.decode('utf-8', 'replace')}")
    try:
        answer = decode(reply.data, _result_decoder)  # within the contract's limits, or refused
    except InvalidInput:
        return Answer(None, False, BAD_ANSWER)
    return Answer(answer.exit_code, answer.timed_out, answer.output)
