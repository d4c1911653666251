"""TLS settings: which URLs turn TLS on, and the start errors that name the variable."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from shared.platform.config import Config, ConfigError
from shared.platform.tls import client_context, nats_context, redis_context

MAKE_CERTS = Path(__file__).resolve().parents[2] / "deploy" / "tls" / "make-dev-certs.sh"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", str(MAKE_CERTS), str(out)], check=True, capture_output=True, timeout=60)
    return out


def test_plain_urls_mean_no_tls() -> None:
    config = Config.from_env({})
    assert nats_context(config) is None and redis_context(config) is None


def test_tls_urls_give_verifying_contexts(certs: Path) -> None:
    config = Config.from_env(
        {
            "NATS_URL": "tls://n1:4222,tls://n2:4222",
            "REDIS_URL": "rediss://r:6380/0",
            "CONTINUITY_NATS_TLS_CA": str(certs / "ca.crt"),
            "CONTINUITY_NATS_TLS_CERT": str(certs / "client.crt"),
            "CONTINUITY_NATS_TLS_KEY": str(certs / "client.key"),
        }
    )
    for context in (nats_context(config), redis_context(config)):
        assert context is not None
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert config.redis_tls_ca == ""  # the system's trust store


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"NATS_URL": "tls://a:4222,nats://b:4222"}, "NATS_URL"),
        ({"REDIS_URL": "rediss://r:6380/0?ssl_cert_reqs=none"}, "REDIS_URL"),
        ({"CONTINUITY_NATS_TLS_CA": "{ca}"}, "CONTINUITY_NATS_TLS_CA is set but NATS_URL"),
        ({"CONTINUITY_REDIS_TLS_CA": "{ca}"}, "CONTINUITY_REDIS_TLS_CA is set but REDIS_URL"),
        ({"REDIS_URL": "rediss://r", "CONTINUITY_REDIS_TLS_CA": "/no/such.crt"}, "CONTINUITY_REDIS_TLS_CA"),
        ({"NATS_URL": "tls://n", "CONTINUITY_NATS_TLS_CERT": "{cert}"}, "CONTINUITY_NATS_TLS_KEY"),
        ({"NATS_URL": "tls://n", "CONTINUITY_NATS_TLS_KEY": "{key}"}, "CONTINUITY_NATS_TLS_CERT"),
        ({"NATS_URL": "tls://n", "CONTINUITY_NATS_TLS_CA": "{key}"}, "CONTINUITY_NATS_TLS_CA"),
        (
            {
                "REDIS_URL": "rediss://r",
                "CONTINUITY_REDIS_TLS_CERT": "{ca}",
                "CONTINUITY_REDIS_TLS_KEY": "{key}",
            },
            "CONTINUITY_REDIS_TLS_CERT",
        ),
    ],
)
def test_bad_tls_settings_fail_at_start_naming_the_variable(
    certs: Path, env: dict[str, str], names: str
) -> None:
    paths = {"ca": certs / "ca.crt", "cert": certs / "client.crt", "key": certs / "client.key"}
    with pytest.raises(ConfigError, match=names):
        Config.from_env({k: v.format(**paths) for k, v in env.items()})


def test_an_encrypted_key_is_refused_instead_of_prompting(certs: Path, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    result = subprocess.run(
        ["openssl", "pkey", "-in", str(certs / "client.key"), "-aes256", "-passout", "pass:x"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    encrypted.write_bytes(result.stdout)
    with pytest.raises(ConfigError, match="encrypted"):
        client_context("", str(certs / "client.crt"), str(encrypted), prefix="CONTINUITY_NATS_TLS")


def test_tls_to_a_redis_cluster_is_refused_as_a_configuration_error() -> None:
    from shared.platform.redis import Redis

    with pytest.raises(ConfigError, match="Redis Cluster"):
        Redis("rediss://127.0.0.1:7000/0", cluster="on", ssl_context=ssl.create_default_context())
