"""A throwaway CA and certificates for TLS tests, made by deploy/tls/make-dev-certs.sh (openssl)
at test time: a server certificate for localhost and 127.0.0.1, and a client certificate; and
route certificates for NATS clusters (`make_route_certs`)."""

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


ROUTE_EXTENSIONS = """basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost,IP:127.0.0.1
"""
"""A route certificate as docs/operations/tls.md asks cert-manager for one (`nats-route`): server
and client authentication (each server dials the others and is dialled), for the names the
routes dial (here localhost instead of *.nats-headless.nats.svc.cluster.local)."""


@dataclass(frozen=True)
class RouteCerts:
    """Two CAs, each with a route certificate: the cluster's, and a stranger's."""

    dir: Path

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.crt")

    def cert(self, who: str = "route") -> str:
        return str(self.dir / f"{who}.crt")

    def key(self, who: str = "route") -> str:
        return str(self.dir / f"{who}.key")


def make_route_certs(out: Path) -> RouteCerts:
    """`ca.crt` with `route.crt` and `spare.crt` (both the cluster's), and `stranger.crt` from a CA
    of its own (`other-ca.crt`)."""
    out.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=out, check=True, capture_output=True, timeout=60)

    def key(name: str) -> None:
        run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")

    for ca in ("ca", "other-ca"):
        key(ca)
        run("req", "-x509", "-new", "-key", f"{ca}.key", "-sha256", "-days", "2", "-subj", f"/CN={ca}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            "-out", f"{ca}.crt")  # fmt: skip
    (out / "route.ext").write_text(ROUTE_EXTENSIONS)
    for name, ca in (("route", "ca"), ("spare", "ca"), ("stranger", "other-ca")):
        key(name)
        run("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr")
        signer = ("-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial")
        run("x509", "-req", "-in", f"{name}.csr", *signer, "-sha256", "-days", "2", "-extfile", "route.ext",
            "-out", f"{name}.crt")  # fmt: skip
    return RouteCerts(out)
