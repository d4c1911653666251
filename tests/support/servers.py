"""Servers a test configures itself, beyond the launchers of `continuity.devstack.servers`."""

from __future__ import annotations

import signal
from pathlib import Path

from continuity.devstack.servers import NatsServer, nats_server_binary


class ConfiguredNatsServer(NatsServer):
    """A NATS server (JetStream) started from a configuration file, which a test can rewrite
    and have the running server reload (SIGHUP), as an operator would."""

    def __init__(self, data_dir: Path, settings: str = "") -> None:
        super().__init__(data_dir)
        self.config_path = data_dir / "nats.conf"
        self._write(settings)

    def _write(self, settings: str) -> None:
        store = self.data_dir / "jetstream"
        self.config_path.write_text(
            f'host: "127.0.0.1"\nport: {self.port}\njetstream {{ store_dir: "{store}" }}\n{settings}\n'
        )

    def command(self) -> list[str]:
        return [nats_server_binary(), "-c", str(self.config_path)]

    def reload(self, settings: str) -> None:
        assert self.proc is not None
        self._write(settings)
        self.proc.send_signal(signal.SIGHUP)
