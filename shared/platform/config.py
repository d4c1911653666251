"""Configuration as one typed object: every setting, with a docstring naming its variable and
a default that suits a developer's machine; production sets the variables (see deploy/).

The variables are read and checked in shared/platform/environment.py; a bad value fails at
start with a message naming the variable, never its value when the value may be secret.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from shared.platform import environment, tls

# Their home is the environment's side; many callers import them from here.
from shared.platform.environment import MIB as MIB
from shared.platform.environment import NATS_TLS_PREFIX as NATS_TLS_PREFIX
from shared.platform.environment import REDIS_TLS_PREFIX as REDIS_TLS_PREFIX
from shared.platform.environment import ConfigError as ConfigError
from shared.platform.environment import parse_runner_keys as parse_runner_keys


@dataclass(frozen=True)
class Config:
    nats_url: str = "nats://127.0.0.1:4222"
    """NATS_URL: one or more comma-separated NATS server URLs."""

    nats_nkey_seed_file: str | None = None
    """CONTINUITY_NATS_NKEY_SEED_FILE: a file holding the NKEY seed to authenticate with (a user
    and password go in NATS_URL instead, `nats://user:password@host:4222`)."""

    nats_creds_file: str | None = None
    """CONTINUITY_NATS_CREDS_FILE: a creds file (a user JWT and its NKEY seed) to authenticate
    with, under the decentralized layout (`continuity nats init`; operator-mode servers)."""

    nats_monitor_creds_file: str | None = None
    """CONTINUITY_NATS_MONITOR_CREDS_FILE: the session-store only: the creds file of the system
    account's `monitor` user (`creds/monitor.creds` of `continuity nats init`), with which it
    asks the servers for the runners' live connections and counts the connections they refuse
    (services/session_store/presence.py). Unset, and CONTINUITY_NATS_MONITOR_PASSWORD_FILE
    unset too, `continuity.runners.list` answers `connections: null`."""

    nats_monitor_password_file: str | None = None
    """CONTINUITY_NATS_MONITOR_PASSWORD_FILE: the session-store only, in the config-file layout:
    a file holding the password of a user `monitor` of `SYS` with the permissions of
    shared.platform.bus.monitor (deploy/nats/auth.conf defines it); the
    monitor connection goes to NATS_URL's servers as that user (CONTINUITY_NATS_MONITOR_CREDS_FILE,
    when set, is used instead)."""

    nats_archive_creds_file: str | None = None
    """CONTINUITY_NATS_ARCHIVE_CREDS_FILE: the archiver's creds file for its remote moves, as
    the user of the `ARCHIVE` account in the decentralized layout (`creds/archive.creds` of
    `continuity nats init`); unset, the moves go out on the service's own connection."""

    nats_inbox_prefix: str = ""
    """CONTINUITY_NATS_INBOX_PREFIX: the prefix of this process's reply subjects (its inboxes);
    unset, `_INBOX.<name>` after the process (`_INBOX.classifier`, `_INBOX.console`, ...; the
    `continuity` command: `_INBOX.operator`): under deploy/nats/auth.conf each user may subscribe
    only below its own prefix, so no other user reads its replies."""

    reply_prefixes: tuple[str, ...] = ("_INBOX.", "_R_.")
    """CONTINUITY_REPLY_PREFIXES: comma-separated prefixes of the reply subjects a service answers
    (inboxes, and `_R_.`, the server's replies to a service import); any other request is dropped."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """REDIS_URL: the Redis (or Redis-compatible) server holding every record; on Redis Cluster,
    any one node of the cluster (the others are found from it)."""

    nats_password_file: str = ""
    """CONTINUITY_NATS_PASSWORD_FILE: a file holding the password of the user NATS_URL names
    (`tls://classifier@nats:4222`), which then carries none: the password is in neither the
    URL nor the environment. `nats_url` holds the URL with it."""

    redis_password_file: str = ""
    """CONTINUITY_REDIS_PASSWORD_FILE: the same for the Redis user REDIS_URL names
    (`rediss://classifier@redis:6379/0`); `redis_url` holds the URL with it."""

    redis_cluster: str = "auto"
    """CONTINUITY_REDIS_CLUSTER: `auto` (ask the server: `INFO cluster`), `on` or `off`."""

    redis_wait_replicas: int = 0
    """CONTINUITY_REDIS_WAIT_REPLICAS: replicas that must hold a session commit before it is
    acknowledged (Redis `WAIT` right after the commit script); 0, the default, waits for none.
    A commit fewer replicas hold within CONTINUITY_REDIS_WAIT_TIMEOUT_MS is answered
    `unavailable` (retryable): it may or may not survive a failover, as if it had timed out."""

    redis_wait_timeout_ms: int = 200
    """CONTINUITY_REDIS_WAIT_TIMEOUT_MS: how long a commit waits for those replicas (and for
    the append-only files of CONTINUITY_REDIS_WAIT_AOF_*)."""

    redis_wait_aof_local: int = 0
    """CONTINUITY_REDIS_WAIT_AOF_LOCAL: 1, a session commit is acknowledged only once the master
    has fsynced it to its append-only file (Redis `WAITAOF`, Redis 7.2 or later, or Valkey, with
    `appendonly yes`: checked at connection); 0, the default, does not wait for it."""

    redis_wait_aof_replicas: int = 0
    """CONTINUITY_REDIS_WAIT_AOF_REPLICAS: replicas that must have fsynced a session commit to
    their append-only files before it is acknowledged (`WAITAOF`); 0, the default, waits for none."""

    nats_tls_ca: str = ""
    """CONTINUITY_NATS_TLS_CA: PEM file of the CA that signs the NATS servers' certificates;
    unset, the system's trust store. TLS itself is turned on by `tls://` URLs in NATS_URL."""

    nats_tls_cert: str = ""
    """CONTINUITY_NATS_TLS_CERT: PEM client certificate (chain) presented to NATS servers that
    require mutual TLS; needs CONTINUITY_NATS_TLS_KEY."""

    nats_tls_key: str = ""
    """CONTINUITY_NATS_TLS_KEY: PEM file of that certificate's (unencrypted) private key."""

    nats_tls_server_name: str = ""
    """CONTINUITY_NATS_TLS_SERVER_NAME: the name the NATS servers' certificates are checked
    against instead of the URL's host, for a port-forward (`tls://127.0.0.1:14222` reaching
    `nats.nats.svc.cluster.local`); unset, the URL's host."""

    redis_tls_ca: str = ""
    """CONTINUITY_REDIS_TLS_CA: PEM file of the CA that signs the Redis server's certificate;
    unset, the system's trust store. TLS itself is turned on by a `rediss://` REDIS_URL."""

    redis_tls_cert: str = ""
    """CONTINUITY_REDIS_TLS_CERT: PEM client certificate (chain) presented to a Redis that
    requires mutual TLS (`tls-auth-clients yes`); needs CONTINUITY_REDIS_TLS_KEY."""

    redis_tls_key: str = ""
    """CONTINUITY_REDIS_TLS_KEY: PEM file of that certificate's (unencrypted) private key."""

    redis_tls_server_name: str = ""
    """CONTINUITY_REDIS_TLS_SERVER_NAME: the same for the Redis server's certificate."""

    runner_keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """CONTINUITY_RUNNER_KEYS: `k1=<base64>,k2=<base64>`, the live HMAC keys of runners' command
    results; several may be live at once for rotation."""

    archive_timeout_s: float = 30.0
    """CONTINUITY_ARCHIVE_TIMEOUT_S: how long the archiver waits for a runner's remote move."""

    metrics_host: str = "0.0.0.0"
    """CONTINUITY_METRICS_HOST: address of the `/metrics`, `/healthz` and `/readyz` server."""

    metrics_port: int = 9464
    """CONTINUITY_METRICS_PORT: its port; 0 picks a free one."""

    stream_replicas: int = 1
    """CONTINUITY_STREAM_REPLICAS: JetStream replicas of every stream (3 in production)."""

    duplicate_window_s: float = 120.0
    """CONTINUITY_DUPLICATE_WINDOW_S: the streams' `Nats-Msg-Id` duplicate window."""

    events_max_bytes: int = 1024 * MIB
    """CONTINUITY_EVENTS_MAX_BYTES: what CONTINUITY_EVENTS may hold (bytes, or with Ki, Mi or
    Gi); full, its oldest events go. JetStream reserves every stream's size in the server's
    store (`max_file_store`): the four and CONTINUITY_HISTORY together must fit it."""

    decisions_max_bytes: int = 1024 * MIB
    """CONTINUITY_DECISIONS_MAX_BYTES: the same for CONTINUITY_DECISIONS."""

    work_max_bytes: int = 256 * MIB
    """CONTINUITY_WORK_MAX_BYTES: the same for CONTINUITY_WORK, which refuses new work items when
    full (their publishers try again) rather than drop waiting ones."""

    dead_max_bytes: int = 512 * MIB
    """CONTINUITY_DEAD_MAX_BYTES: the same for CONTINUITY_DEAD; full, its oldest letters go."""

    stream_messages_per_runner: int = 2048
    """CONTINUITY_STREAM_MESSAGES_PER_RUNNER: the messages of one runner CONTINUITY_EVENTS and
    CONTINUITY_DECISIONS keep (`max_msgs_per_subject`: each of their subjects names one runner);
    past it that runner's oldest go, never another runner's."""

    max_deliver: int = 5
    """CONTINUITY_MAX_DELIVER: deliveries of a message before it moves to `continuity.dead.exhausted`."""

    nak_delay_s: float = 1.0
    """CONTINUITY_NAK_DELAY_S: redelivery delay after a transient failure (Redis or NATS down)."""

    ack_wait_s: float = 30.0
    """CONTINUITY_ACK_WAIT_S: how long JetStream waits for an ack before redelivering."""

    retry_backoff_s: float = 5.0
    """CONTINUITY_RETRY_BACKOFF_S: base of `not_before` for `retry_same_session` (doubles per attempt)."""

    drain_timeout_s: float = 10.0
    """CONTINUITY_DRAIN_TIMEOUT_S: how long a SIGTERM drain may take before the process exits,
    all of it: the service's parts share it, and closing the NATS connection gets what they
    left, at least one second."""

    outcome_wait_s: float = 3600.0
    """CONTINUITY_OUTCOME_WAIT_S: how long a run decided `retry_same_session`, `open_replacement`
    or `continue_fresh` may wait for its `turn_completed` before it is `abandoned` (contract 4.6)."""

    request_concurrency: int = 256
    """CONTINUITY_REQUEST_CONCURRENCY: requests one replica handles at once."""

    consumer_in_flight: int = 256
    """CONTINUITY_CONSUMER_IN_FLIGHT: messages of one durable consumer a replica handles at once.
    They are asked for as slots free up, at least a quarter of them per pull request under load:
    the more in hand, the more of their Redis commands and publications share one write."""

    runner_in_flight: int = 128
    """CONTINUITY_RUNNER_IN_FLIGHT: events of one runner the classifier handles at once (its
    share of CONTINUITY_CONSUMER_IN_FLIGHT); the classifier holds more, and starts them by
    runner in turn, so one runner's flood cannot delay another's decisions."""

    runner_event_rate: float = 200.0
    """CONTINUITY_RUNNER_EVENT_RATE: events a second one runner may send, all classifier replicas
    together; past it (and its burst) an event is refused `quota_exceeded`, with when to send it
    again."""

    runner_event_burst: int = 1000
    """CONTINUITY_RUNNER_EVENT_BURST: events one runner may send at once above its rate."""

    tenant_event_rate: float = 2000.0
    """CONTINUITY_TENANT_EVENT_RATE: the same for all runners of one tenant together."""

    tenant_event_burst: int = 10000
    """CONTINUITY_TENANT_EVENT_BURST: a tenant's burst above its rate."""

    runner_stored_runs: int = 100_000
    """CONTINUITY_RUNNER_STORED_RUNS: runs one runner may start within the retention (their
    records are kept that long); past it, a new run's event is refused `quota_exceeded`."""

    tenant_stored_runs: int = 1_000_000
    """CONTINUITY_TENANT_STORED_RUNS: the same for all runners of one tenant."""

    tenant_recovery_budget: int = 1000
    """CONTINUITY_TENANT_RECOVERY_BUDGET: retries and replacements the classifier decides for one
    tenant per window; past it, such an event stops for an operator with the reason
    `tenant_recovery_budget_exhausted` (the storm breaker)."""

    tenant_recovery_window_s: float = 600.0
    """CONTINUITY_TENANT_RECOVERY_WINDOW_S: the storm breaker's window."""

    log_level: str = "INFO"
    """CONTINUITY_LOG_LEVEL: DEBUG, INFO, WARNING or ERROR."""

    retention_days: float = 30.0
    """CONTINUITY_RETENTION_DAYS: how long the records of a finished run (run record, decision
    slots, audit trail, run index, archive progress, a delivered reconciliation and its index
    entry, outbox remnants) are kept after its last step; a fraction of a day is allowed
    (tests use seconds). A run waiting on an operator or an open reconciliation never expires
    (docs/contract-v1.md, section 9.9)."""

    history_linger_s: float = 86400.0
    """CONTINUITY_HISTORY_LINGER_S: how long a finished run's records stay in Redis once
    CONTINUITY_HISTORY holds their copy (contract 9.14): longer than any runner waits before it
    sends a report again (9.13). The stream keeps them for the retention."""

    history_max_bytes: int = 1024 * MIB
    """CONTINUITY_HISTORY_MAX_BYTES: what CONTINUITY_HISTORY may hold; full, its oldest runs go."""

    archive_retention_days: float = 90.0
    """CONTINUITY_ARCHIVE_RETENTION_DAYS: how long an archive copy of a session record
    (`continuity:archive:{<sk>}:<archive_id>`, and the copy of a held record kept when a new
    session is committed over it) is kept after it was made."""

    tenancy: str = "enforced"
    """CONTINUITY_TENANCY: `enforced` (a runner the runner directory does not know acts on
    nothing) or `open` (it may act on any tenant: a development stack without authorization).
    Issued runners act only on their tenants' sessions either way (docs/contract-v1.md, 10)."""

    session_claims: str = "refuse"
    """CONTINUITY_SESSION_CLAIMS: `refuse` or `allow` a runner's claim of a session another
    runner of its tenant owns (runner pools where a task moves to another host); an operator's
    transfer is always possible."""

    runner_cache_s: float = 2.0
    """CONTINUITY_RUNNER_CACHE_S: how long a replica keeps a runner's directory record before
    reading it again: a runner issued, revoked or given other tenants is seen within it."""

    policy_file: str = ""
    """CONTINUITY_POLICY_FILE: a decision policy (docs/policies.md) the classifier and the
    session-store decide by instead of the shipped one; checked against the invariants at start,
    and a policy that breaks one stops the start. Empty: the shipped policy."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """The configuration `env` (the process's environment when None) gives; a bad value
        raises `ConfigError`."""
        config = cls(**environment.read(os.environ if env is None else env, vars(cls())))
        # Load the certificates now, so that an unreadable or malformed file stops the start.
        tls.nats_context(config)
        tls.redis_context(config)
        return config

    def inbox_prefix(self, name: str) -> str:
        """The inbox prefix of the process `name` (a service's name, `operator` for the command):
        CONTINUITY_NATS_INBOX_PREFIX when set, else `_INBOX.<name>`."""
        return self.nats_inbox_prefix or default_inbox_prefix(name)


def default_inbox_prefix(name: str) -> str:
    """`_INBOX.<name>`: the one prefix deploy/nats/auth.conf lets the user `name` subscribe below."""
    return f"_INBOX.{name}"


# Every CONTINUITY_* variable -----------------------------------------------------------------
# A mistyped name (an S too many after CONTINUITY_MAX_DELIVER) would be ignored without a word,
# so each command and service names the ones nothing reads. The names come from the readers
# themselves, so that a variable added to one is known at once: Config's are recorded from
# what `Config.from_env` reads (`config_variables`), a service's own settings are declared by
# its spec (services/registry.py gathers them); only the NATS server's passwords, read by no
# Python code, are listed.

NATS_PASSWORD_VARIABLES = tuple(
    f"CONTINUITY_NATS_{user}_PASSWORD"
    for user in (
        "CLASSIFIER",
        "SESSION_STORE",
        "ARCHIVER",
        "RECONCILIATION",
        "OPERATOR",
        "CONSOLE",
        "SYSTEM",
        "MONITOR",
    )
)
"""The NATS server's passwords of each user (deploy/nats/auth.conf, compose, Helm): a shell
that runs the servers exports them too."""

NATS_ROUTE_VARIABLES = ("CONTINUITY_NATS_ROUTE_PASSWORD", "CONTINUITY_NATS_ROUTES")
"""The NATS servers' route password and route URLs (deploy/helm/nats-values.yaml), read by the
servers alone."""

VARIABLE_PREFIX = "CONTINUITY_"


class _Reads(Mapping[str, str]):
    """An empty environment that notes every name asked of it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@functools.cache
def config_variables() -> frozenset[str]:
    """Every CONTINUITY_* variable `Config` reads, and the NATS server's passwords."""
    reads = _Reads()
    with contextlib.suppress(ConfigError):  # what was read up to a failure is still known
        Config.from_env(reads)
    config = frozenset(n for n in reads.names if n.startswith(VARIABLE_PREFIX))
    return (
        config | frozenset(NATS_PASSWORD_VARIABLES) | frozenset(NATS_ROUTE_VARIABLES) | LOCAL_SERVER_VARIABLES
    )


LOCAL_SERVER_VARIABLES = frozenset({"CONTINUITY_NATS_SERVER_BIN"})
"""Read by `continuity up` and the test fixtures when they start a server of their own
(continuity/devstack/servers.py), never by a service."""


def unknown_variables(env: Mapping[str, str], known: frozenset[str]) -> list[tuple[str, str | None]]:
    """Each CONTINUITY_* variable of `env` that is not `known`, with the known name closest to
    it (None when none is close), sorted by name."""
    suffixes = {name[len(VARIABLE_PREFIX) :]: name for name in known}
    found = []
    for name in sorted(n for n in env if n.startswith(VARIABLE_PREFIX) and n not in known):
        # Compared without the shared prefix, which would make every name look close.
        close = difflib.get_close_matches(name[len(VARIABLE_PREFIX) :], suffixes, n=1, cutoff=0.75)
        found.append((name, suffixes[close[0]] if close else None))
    return found


def unknown_variable_message(name: str, closest: str | None) -> str:
    """One line about an unknown variable, for a person."""
    hint = f"; did you mean {closest}?" if closest else ""
    return f"{name} is not a Continuity variable and is ignored{hint}"
