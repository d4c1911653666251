"""The operator's folder of the decentralized layout, written once by `continuity nats init`:

    keys/operator.nk    the operator's identity (kept offline after init)
    keys/signing.nk     the operator's signing key: signs every account, the runners' included
    keys/CONTINUITY.nk  the services' account: signs its users
    keys/SYS.nk         the system account: signs its users
    keys/ARCHIVE.nk     the account of the archiver's remote moves: signs its one user
    creds/<user>.creds  one creds file per user of CONTINUITY (auth.conf's users), `system`
                        and `monitor` (SYS's read-only user: the session-store's view of the
                        servers' connections and authentication failures)
    jwt/<name>.jwt      the operator's and the accounts' first JWTs (nothing secret)
    accounts.json       the public keys (nothing secret)
    operator.conf       what each nats-server includes: operator, system account, resolver
                        (`server_conf` writes it again for a resolver folder of another path)

Seeds and creds are created mode 0600 and never overwritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from continuity.natsauth import layout
from shared.platform.bus import jwt, monitor
from shared.platform.bus.jwt import Key

SERVER_CONF = "operator.conf"
PUBLIC = "accounts.json"


@dataclass(frozen=True)
class OperatorDir:
    """An initialised folder, read back: what issuing and revoking runners need."""

    path: Path
    signing: Key
    continuity: str
    """CONTINUITY's public key."""
    archive: str
    """ARCHIVE's public key."""
    system_creds: Path

    @property
    def monitor_creds(self) -> Path:
        return self.creds(monitor.MONITOR_USER)

    @classmethod
    def read(cls, path: Path) -> OperatorDir:
        names = json.loads((path / PUBLIC).read_text())
        signing = Key.from_seed((path / "keys" / "signing.nk").read_bytes())
        system = path / "creds" / f"{layout.SYSTEM_USER}.creds"
        return cls(path, signing, names[layout.CONTINUITY], names[layout.ARCHIVE], system)

    def creds(self, user: str) -> Path:
        return self.path / "creds" / f"{user}.creds"

    def server_conf(self, resolver_dir: str) -> str:
        """The include of a nats-server whose resolver keeps its accounts in `resolver_dir`."""
        names = json.loads((self.path / PUBLIC).read_text())
        tokens = {name: (self.path / "jwt" / f"{name}.jwt").read_text().strip() for name in _JWTS}
        preload = {names[name]: tokens[name] for name in _JWTS[1:]}
        return _server_conf(tokens["operator"], names[layout.SYS], preload, resolver_dir)


_JWTS = ("operator", layout.SYS, layout.CONTINUITY, layout.ARCHIVE)


def _server_conf(operator_jwt: str, system: str, preload: dict[str, str], resolver_dir: str) -> str:
    lines = [
        "# The decentralized layout (continuity nats init): accounts are JWTs signed by the",
        "# operator's signing key; runners' accounts arrive by push to the full resolver.",
        f'operator: "{operator_jwt}"',
        f"system_account: {system}",
        "resolver: {",
        "  type: full",
        f'  dir: "{resolver_dir}"',
        "  allow_delete: false",
        '  interval: "2m"',
        '  timeout: "5s"',
        "}",
        "resolver_preload: {",
        *(f'  {public}: "{token}"' for public, token in preload.items()),
        "}",
    ]
    return "\n".join(lines) + "\n"


def init(path: Path, resolver_dir: str, auth_conf: Path = layout.AUTH_CONF) -> OperatorDir:
    """Create the folder's keys, accounts, users and server include (refusing a folder already
    initialised)."""
    if (path / PUBLIC).exists():
        raise FileExistsError(f"{path} is already initialised")
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)  # whatever the umask: the folder holds the signing key
    (path / "keys").mkdir(exist_ok=True, mode=0o700)
    (path / "creds").mkdir(exist_ok=True, mode=0o700)
    operator, signing = Key.new("operator"), Key.new("operator")
    accounts = {name: Key.new("account") for name in (layout.CONTINUITY, layout.ARCHIVE, layout.SYS)}
    for name, key in (("operator", operator), ("signing", signing), *accounts.items()):
        jwt.write_secret(path / "keys" / f"{name}.nk", key.seed + b"\n")
    operator_jwt = jwt.encode(
        layout.operator("continuity", operator.public, [signing.public], accounts[layout.SYS].public),
        operator,
    )
    continuity_jwt = jwt.encode(
        layout.continuity_account(accounts[layout.CONTINUITY].public, auth_conf), signing
    )
    sys_jwt = jwt.encode(layout.account(layout.SYS, accounts[layout.SYS].public), signing)
    archive_jwt = jwt.encode(layout.archive_account(accounts[layout.ARCHIVE].public, {}), signing)
    users = {
        **{
            (name, layout.CONTINUITY): rules
            for name, rules in layout.continuity_rules(auth_conf)["users"].items()
        },
        (layout.SYSTEM_USER, layout.SYS): {},
        (layout.ARCHIVE_USER, layout.ARCHIVE): layout.ARCHIVE_RULES,
        (monitor.MONITOR_USER, layout.SYS): monitor.MONITOR_RULES,
    }
    for (name, account_name), rules in users.items():
        user_key = Key.new("user")
        token = jwt.encode(layout.user(name, user_key.public, rules), accounts[account_name])
        jwt.write_secret(path / "creds" / f"{name}.creds", jwt.creds(token, user_key.seed))
    (path / "jwt").mkdir(exist_ok=True)
    for name, token in zip(_JWTS, (operator_jwt, sys_jwt, continuity_jwt, archive_jwt), strict=True):
        (path / "jwt" / f"{name}.jwt").write_text(token + "\n")
    public = {"operator": operator.public, "signing": signing.public} | {
        n: k.public for n, k in accounts.items()
    }
    (path / PUBLIC).write_text(json.dumps(public, indent=2) + "\n")
    folder = OperatorDir.read(path)
    (path / SERVER_CONF).write_text(folder.server_conf(resolver_dir))
    return folder
