"""The NATS credential and reply-guard settings of shared/platform/config.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.platform.config import Config, ConfigError


def test_an_nkey_seed_file_must_be_readable(tmp_path: Path) -> None:
    seed = tmp_path / "service.nk"
    seed.write_text("SUAEXAMPLE\n")
    assert Config.from_env({"CONTINUITY_NATS_NKEY_SEED_FILE": str(seed)}).nats_nkey_seed_file == str(seed)
    assert Config.from_env({}).nats_nkey_seed_file is None
    with pytest.raises(ConfigError, match="CONTINUITY_NATS_NKEY_SEED_FILE"):
        Config.from_env({"CONTINUITY_NATS_NKEY_SEED_FILE": str(tmp_path / "missing.nk")})


def test_reply_prefixes_default_to_inboxes_and_service_import_replies() -> None:
    assert Config.from_env({}).reply_prefixes == ("_INBOX.", "_R_.")
    custom = Config.from_env({"CONTINUITY_REPLY_PREFIXES": "_INBOX.ops., _R_."})
    assert custom.reply_prefixes == ("_INBOX.ops.", "_R_.")


@pytest.mark.parametrize("bad", ["_INBOX", "_INBOX.>", "$JS.*.", "a b."])
def test_a_reply_prefix_is_literal_tokens_ending_with_a_dot(bad: str) -> None:
    with pytest.raises(ConfigError, match="CONTINUITY_REPLY_PREFIXES"):
        Config.from_env({"CONTINUITY_REPLY_PREFIXES": bad})
