"""sdk/bad-inputs.json, the inputs both runner SDKs refuse or must send: its cases' arguments,
and the Python SDK call each case names (the TypeScript SDK's tests play the same file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from continuity_runner import CommandResult, ErrorInfo, Runner, SessionRef, ToolCall

INPUTS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "sdk" / "bad-inputs.json").read_text()
)
BAD: list[dict[str, Any]] = INPUTS["bad"]
GOOD: list[dict[str, Any]] = INPUTS["good"]
ARCHIVE_ANSWERS: list[dict[str, Any]] = INPUTS["archive_answers"]


def expand(value: Any) -> Any:
    """`value` with every `{"repeat": s, "times": n}` written out."""
    if isinstance(value, dict):
        if set(value) == {"repeat", "times"}:
            return value["repeat"] * value["times"]
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def merged(base: Any, over: Any) -> Any:
    """`over` merged into `base`: objects field by field, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict) and set(over) != {"repeat", "times"}:
        return {**base, **{k: merged(base.get(k), v) for k, v in over.items()}}
    return over


def arguments(case: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the case's call: its input merged into the call's defaults."""
    args: dict[str, Any] = expand(merged(INPUTS["calls"][case["call"]], case.get("input", {})))
    return args


def strings(value: Any) -> list[str]:
    """Every string in `value`, however deep."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def _as_structs(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the Python SDK takes them: its Structs for the nested objects. Making a
    Struct checks its times, so a bad time is refused here, as in a runner's own code."""
    kinds = {"session": SessionRef, "error": ErrorInfo, "command_result": CommandResult}
    out = {k: kinds[k](**v) if k in kinds and isinstance(v, dict) else v for k, v in args.items()}
    if isinstance(args.get("pending_tool_call"), dict):
        out["pending_tool_call"] = ToolCall(**args["pending_tool_call"])
    return out


async def play(runner: Runner, call: str, args: dict[str, Any]) -> Any:
    """Make the SDK call `call` (any but `connect`) with `args`; its result."""
    built = _as_structs(args)
    if call == "decide":
        return await runner.decide(**built)
    if call == "commit":
        return await runner.commit(**built)
    if call == "reject":
        return await runner.reject(**built)
    if call == "get":
        return await runner.get(**built)
    if call == "report_resume_failure":
        return await runner.report_resume_failure(**built)
    if call == "sign_command_result":
        return runner.sign_command_result(**built)
    raise AssertionError(f"no SDK call {call}")
