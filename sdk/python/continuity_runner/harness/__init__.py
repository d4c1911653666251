"""Harness adapters: the shipped harness table (sdk/harnesses.json), the matcher that turns a
resume's outcome into a closed failure class, the presence probe, and `Runner.recover`'s
verdicts.

```python
from continuity_runner import harness

adapter = harness.adapter("claude-code")  # UnknownHarness for a name the table does not have
adapter.assess(harness.Outcome(exit_code=1, stdout="", stderr=stderr))
# Assessment(failure_class='native_session_missing', rule='claude-code.missing.stderr')
adapter.probe(session_id, cwd=cwd, env=os.environ)  # "present" | "absent" | "unknown"
adapter.capabilities("2.1.332")  # Capabilities | None
verdict = await runner.recover(adapter, outcome, session=..., run_id=..., attempt=1,
                               native_session_id=session_id, cwd=cwd, env=os.environ)
# NotAFailure | Reported | Rejected
```
"""

from continuity_runner.harness.adapter import Adapter, UnknownHarness, adapter, names
from continuity_runner.harness.match import (
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_LINES,
    MAX_OUTCOME_BYTES,
    Assessment,
    Outcome,
    OutcomeError,
    OutcomeInput,
    assess_with,
    check_outcome,
    decode_outcome,
    json_equal,
    prepare,
    strip_ansi,
)
from continuity_runner.harness.probe import Env, Presence, claude_key, cwd_key, sessions_root
from continuity_runner.harness.recover import FAILED_STATUS, NotAFailure, Rejected, Reported, Verdict
from continuity_runner.harness.table import (
    CWD_KEY_SCHEMES,
    HARNESS_CLASSES,
    Capabilities,
    Harness,
    HarnessClass,
    InvalidTable,
    Rule,
    Sessions,
    Table,
    When,
    load_table,
    shipped_path,
    shipped_table,
    validate_table,
)
from continuity_runner.harness.versions import parse_range, parse_version, satisfies

__all__ = [
    "CWD_KEY_SCHEMES",
    "FAILED_STATUS",
    "HARNESS_CLASSES",
    "MAX_DOCUMENT_BYTES",
    "MAX_DOCUMENT_LINES",
    "MAX_OUTCOME_BYTES",
    "Adapter",
    "Assessment",
    "Capabilities",
    "Env",
    "Harness",
    "HarnessClass",
    "InvalidTable",
    "NotAFailure",
    "Outcome",
    "OutcomeError",
    "OutcomeInput",
    "Presence",
    "Rejected",
    "Reported",
    "Rule",
    "Sessions",
    "Table",
    "UnknownHarness",
    "Verdict",
    "When",
    "adapter",
    "assess_with",
    "check_outcome",
    "claude_key",
    "cwd_key",
    "decode_outcome",
    "json_equal",
    "load_table",
    "names",
    "parse_range",
    "parse_version",
    "prepare",
    "satisfies",
    "sessions_root",
    "shipped_path",
    "shipped_table",
    "strip_ansi",
    "validate_table",
]
