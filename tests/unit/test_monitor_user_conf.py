"""The config-file layout's `monitor` user (deploy/nats/auth.conf, and the dev overlay's copy)
is the decentralized layout's: a user of `SYS` with exactly shared.platform.bus.monitor's
rules, its password from the server's environment like every other user's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continuity.natsauth import conf
from shared.platform.bus.monitor import MONITOR_RULES, MONITOR_USER

ROOT = Path(__file__).resolve().parents[2]
AUTH_CONFS = (
    ROOT / "deploy" / "nats" / "auth.conf",
    ROOT / "deploy" / "kubernetes" / "overlays" / "dev" / "nats" / "auth.conf",
)


def monitor_entry(parsed: dict[str, Any]) -> dict[str, Any]:
    users = parsed["accounts"]["SYS"]["users"]
    (entry,) = [u for u in users if u["user"] == MONITOR_USER]
    return dict(entry)


def other_accounts_users(parsed: dict[str, Any]) -> list[str]:
    return [
        u["user"]
        for name, account in parsed["accounts"].items()
        if name != "SYS" and isinstance(account, dict)
        for u in account.get("users", [])
        if "user" in u
    ]


@pytest.mark.parametrize("path", AUTH_CONFS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_monitor_user_of_sys_has_exactly_the_monitor_rules(path: Path) -> None:
    parsed = conf.load(path)
    entry = monitor_entry(parsed)
    assert entry["permissions"] == MONITOR_RULES
    assert entry["password"] == conf.Ref("CONTINUITY_NATS_MONITOR_PASSWORD")
    assert MONITOR_USER not in other_accounts_users(parsed)  # one `monitor`, in SYS


def test_a_difference_from_the_rules_is_seen(tmp_path: Path) -> None:
    """The check itself: one more subject in the file's rules is not MONITOR_RULES."""
    text = AUTH_CONFS[0].read_text()
    allowed = '      "$SYS.REQ.SERVER.PING.CONNZ"\n'
    assert text.count(allowed) == 1
    planted = tmp_path / "auth.conf"
    planted.write_text(text.replace(allowed, allowed + '      "$SYS.REQ.CLAIMS.UPDATE"\n'))
    assert monitor_entry(conf.load(planted))["permissions"] != MONITOR_RULES
