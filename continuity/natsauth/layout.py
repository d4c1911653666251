"""The decentralized layout: the operator, `SYS`, `CONTINUITY` and one account per runner as
JWT claims, built from the config-file layout's own text (deploy/nats/auth.conf and the runner
account template of continuity/cli/runner_accounts.py, read by `conf`).

What differs from the config-file layout, and why it holds the same rules:
- An export open to named accounts (`accounts: [CONTINUITY]`) is a public export here. Only the
  operator's signing key signs an account, and it writes an import of a runner's archive
  subject into `ARCHIVE` alone, so no other account can import it.
- The archiver's remote moves go out from `ARCHIVE`, an account of their own that imports each
  runner's archive subject, rather than from `CONTINUITY` (`archive_account` says why).
- Limits a config file leaves unset are unlimited; a JWT's would read as zero, so every limit is
  written (`-1`, no limit) but the runner's payload and the accounts' JetStream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from continuity.cli.runner_accounts import account_block
from continuity.natsauth import conf
from shared.platform.bus.jwt import NO_LIMIT

AUTH_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "auth.conf"

CONTINUITY = "CONTINUITY"
ARCHIVE = "ARCHIVE"
SYS = "SYS"
ARCHIVE_SUBJECTS = "continuity.runner.*.archive"
ARCHIVE_USER = "archive"
"""The creds file (`creds/archive.creds`) of `ARCHIVE`'s user, named `archiver` for its inbox."""
ARCHIVE_RULES: dict[str, Any] = {
    "publish": {"allow": [ARCHIVE_SUBJECTS]},
    "subscribe": {"allow": ["_INBOX.archiver.>"]},
}
"""What the archiver's remote-move connection may do: ask runners to move, hear the answers."""
SYSTEM_USER = "system"
_DURATION = re.compile(r"(\d+)(ms|s|m|h)")
_NANOS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def _nanos(duration: str) -> int:
    m = _DURATION.fullmatch(duration)
    if m is None:
        raise conf.ConfError(f"a duration like 1m expected, got {duration!r}")
    return int(m.group(1)) * _NANOS[m.group(2)]


def _limits(payload: int = NO_LIMIT, jetstream: Mapping[str, Any] | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "subs": NO_LIMIT, "data": NO_LIMIT, "payload": payload,
        "imports": NO_LIMIT, "exports": NO_LIMIT, "wildcards": True, "conn": NO_LIMIT, "leaf": NO_LIMIT,
    }  # fmt: skip
    if jetstream is not None:
        limits |= {
            "mem_storage": NO_LIMIT,
            "disk_storage": NO_LIMIT,
            "streams": NO_LIMIT,
            "consumer": NO_LIMIT,
        }
        if jetstream.get("max_bytes_required"):
            limits["max_bytes_required"] = True
    return limits


def permissions(rules: Mapping[str, Any]) -> dict[str, Any]:
    """A config file's `permissions` map as a user JWT's `pub`, `sub` and `resp`."""
    out: dict[str, Any] = {}
    for conf_name, jwt_name in (("publish", "pub"), ("subscribe", "sub")):
        side = rules.get(conf_name) or {}
        lists = {k: list(side[k]) for k in ("allow", "deny") if side.get(k)}
        if lists:
            out[jwt_name] = lists
    responses = rules.get("allow_responses")
    if isinstance(responses, dict):
        out["resp"] = {
            "max": int(responses.get("max", 1)),
            "ttl": _nanos(str(responses.get("expires", "2m"))),
        }
    return out


def _export(entry: Mapping[str, Any]) -> dict[str, Any]:
    subject = entry["service"]
    export: dict[str, Any] = {"name": subject, "subject": subject, "type": "service"}
    if entry.get("response_type"):
        export["response_type"] = str(entry["response_type"]).capitalize()
    return export


def service_import(subject: str, account_public: str) -> dict[str, Any]:
    return {"name": subject, "subject": subject, "account": account_public, "type": "service"}


def account(
    name: str,
    public: str,
    *,
    exports: Iterable[Mapping[str, Any]] = (),
    imports: Iterable[Mapping[str, Any]] = (),
    payload: int = NO_LIMIT,
    jetstream: Mapping[str, Any] | None = None,
    revocations: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    nats: dict[str, Any] = {
        "limits": _limits(payload, jetstream),
        "default_permissions": {"pub": {}, "sub": {}},
        "type": "account",
        "version": 2,
    }
    if exports := list(exports):
        nats["exports"] = exports
    if imports := list(imports):
        nats["imports"] = imports
    if revocations:
        nats["revocations"] = dict(revocations)
    return {"sub": public, "name": name, "nats": nats}


def user(name: str, public: str, rules: Mapping[str, Any] | None = None) -> dict[str, Any]:
    nats = {"subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT, "type": "user", "version": 2}
    return {"sub": public, "name": name, "nats": nats | permissions(rules or {})}


def operator(name: str, public: str, signing_keys: list[str], system_account: str) -> dict[str, Any]:
    nats = {"signing_keys": signing_keys, "system_account": system_account, "type": "operator", "version": 2}
    return {"sub": public, "name": name, "nats": nats}


# ---- the shipped layout, read from its files -------------------------------------------------


def continuity_rules(path: Path = AUTH_CONF) -> dict[str, Any]:
    """`CONTINUITY` of auth.conf: its `jetstream`, `exports` and `users` (name -> permissions)."""
    parsed = conf.load(path)["accounts"][CONTINUITY]
    return {
        "jetstream": parsed.get("jetstream") or {},
        "exports": [_export(e) for e in parsed.get("exports", [])],
        "users": {u["user"]: u.get("permissions") or {} for u in parsed.get("users", [])},
    }


def continuity_account(public: str, path: Path = AUTH_CONF) -> dict[str, Any]:
    """`CONTINUITY`'s claims: auth.conf's exports and JetStream. It imports nothing: the
    archiver's remote moves go out from `ARCHIVE` (`archive_account`)."""
    rules = continuity_rules(path)
    return account(CONTINUITY, public, exports=rules["exports"], jetstream=rules["jetstream"])


def archive_account(public: str, runner_archives: Mapping[str, str]) -> dict[str, Any]:
    """`ARCHIVE`'s claims: each runner's archive subject imported from its account
    (`runner_archives`: runner_id -> the account's public key); its one user is the archiver's
    connection for remote moves (`ARCHIVE_RULES`).

    Why an account of its own, exporting nothing: when an account's JWT changes, a server
    rebuilds its exports, and with them the reply routes of the requests in flight through
    them (measured: a session request in flight through `CONTINUITY`'s exports lost its answer
    when a runner was issued). Issuing or revoking a runner changes `ARCHIVE` alone; a remote
    move's answer comes back through the runner's export, which nothing rebuilds meanwhile."""
    imports = [service_import(archive_subject(rid), key) for rid, key in sorted(runner_archives.items())]
    return account(ARCHIVE, public, imports=imports)


def archive_subject(runner_id: str) -> str:
    return f"continuity.runner.{runner_id}.archive"


def runner_account_name(runner_id: str) -> str:
    return f"RUNNER_{runner_id}"


def runner_claims(
    runner_id: str, account_public: str, user_public: str, continuity_public: str,
    revocations: Mapping[str, int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A runner's account and user claims, from the same template as its runners.conf block."""
    name = runner_account_name(runner_id)
    block = conf.loads(account_block(runner_id, user_public))[name]
    imports = [service_import(i["service"]["subject"], continuity_public) for i in block.get("imports", [])]
    claims = account(
        name,
        account_public,
        exports=[_export(e) for e in block.get("exports", [])],
        imports=imports,
        payload=int(block.get("limits", {}).get("max_payload", NO_LIMIT)),
        revocations=revocations,
    )
    (its_user,) = block["users"]
    return claims, user(runner_id, user_public, its_user.get("permissions"))
