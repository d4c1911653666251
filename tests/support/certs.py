"""A throwaway CA and certificates for TLS tests, made by deploy/tls/make-dev-certs.sh (openssl)
at test time: a server certificate for localhost and 127.0.0.1, and a client certificate."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

MAKE_CERTS = Path(__file__).resolve().parents[2] / "deploy" / "tls" / "make-dev-certs.sh"


@dataclass(frozen=True)
class Certs:
    dir: Path

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.crt")

    @property
    def server_cert(self) -> str:
        return str(self.dir / "server.crt")

    @property
    def server_key(self) -> str:
        return str(self.dir / "server.key")

    @property
    def client_cert(self) -> str:
        return str(self.dir / "client.crt")

    @property
    def client_key(self) -> str:
        return str(self.dir / "client.key")


def make_certs(out: Path) -> Certs:
    subprocess.run(["sh", str(MAKE_CERTS), str(out)], check=True, capture_output=True, timeout=60)
    return Certs(out)
