"""The decentralized layout's pieces without a server: JWTs signed and checked, the reader of the
configuration format, and the claims built from deploy/nats/auth.conf and the runner template
holding exactly the rules of those files."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from continuity.cli.runner_accounts import RUNNER_MAX_PAYLOAD, account_block
from continuity.natsauth import conf, layout
from shared.platform.bus import jwt
from shared.platform.bus.jwt import Key


def test_a_signed_jwt_decodes_to_its_claims_and_names_its_issuer() -> None:
    signer = Key.new("account")
    token = jwt.encode({"sub": "UXYZ", "name": "n", "nats": {"type": "user", "version": 2}}, signer, now=100)
    claims = jwt.decode(token)
    assert (claims["iss"], claims["iat"], claims["name"]) == (signer.public, 100, "n")
    assert claims["jti"] != jwt.decode(jwt.encode(claims, signer, now=100))["jti"]  # never one id twice


def test_a_changed_claim_or_a_foreign_signature_is_refused() -> None:
    signer = Key.new("operator")
    head, body, signature = jwt.encode({"sub": "A", "nats": {}}, signer).split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=="))
    forged["sub"] = "B"
    forged_body = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    with pytest.raises(jwt.JWTError, match="signature"):
        jwt.decode(f"{head}.{forged_body}.{signature}")
    other = jwt.encode({"sub": "A", "nats": {}}, Key.new("operator")).split(".")[2]
    with pytest.raises(jwt.JWTError, match="signature"):
        jwt.decode(f"{head}.{body}.{other}")
    for bad in ("", "a.b", "x.y.z"):
        with pytest.raises(jwt.JWTError):
            jwt.decode(bad)


def test_keys_have_the_prefix_of_their_kind_and_seeds_come_back() -> None:
    for kind, prefix in (("operator", "O"), ("account", "A"), ("user", "U")):
        key = Key.new(kind)
        assert key.public.startswith(prefix) and Key.from_seed(key.seed) == key
    with pytest.raises(jwt.JWTError):
        Key.from_seed(b"SUnot-a-seed")


def test_a_creds_file_holds_the_jwt_and_the_seed(tmp_path: Path) -> None:
    user = Key.new("user")
    text = jwt.creds("header.body.sig", user.seed)
    assert "-----BEGIN NATS USER JWT-----\nheader.body.sig\n------END NATS USER JWT------" in text
    assert f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n" in text
    jwt.write_secret(tmp_path / "u.creds", text)
    assert (tmp_path / "u.creds").stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        jwt.write_secret(tmp_path / "u.creds", text)


def test_the_reader_takes_maps_arrays_strings_references_and_includes(tmp_path: Path) -> None:
    (tmp_path / "more.conf").write_text("extra: [ 1, 2 ]\n")
    text = """
    # a comment
    P = { publish: { allow: [ "a.>" "b" ] } }  // another
    accounts: {
      X: { users: [ { user: u, password: $SECRET, permissions: $P } ], n: -3, on: true }
      include ./more.conf
      include ./absent.conf
    }
    """
    parsed = conf.loads(text, tmp_path)
    x = parsed["accounts"]["X"]
    assert x["users"][0]["permissions"] == {"publish": {"allow": ["a.>", "b"]}}
    assert x["users"][0]["password"] == conf.Ref("SECRET")
    assert (x["n"], x["on"], parsed["accounts"]["extra"]) == (-3, True, [1, 2])
    assert "extra" not in parsed  # an include inside a map stays in that map
    for bad in ("a: {", "a: [ 1", "{ }", 'a: "open'):
        with pytest.raises(conf.ConfError):
            conf.loads(bad)


def test_every_user_of_auth_conf_gets_exactly_its_permissions() -> None:
    parsed = conf.load(layout.AUTH_CONF)["accounts"]["CONTINUITY"]["users"]
    rules = layout.continuity_rules()
    assert sorted(rules["users"]) == sorted(u["user"] for u in parsed)
    for entry in parsed:
        claims = layout.user(entry["user"], "UKEY", entry["permissions"])["nats"]
        for conf_side, jwt_side in (("publish", "pub"), ("subscribe", "sub")):
            for kind in ("allow", "deny"):
                expected = entry["permissions"].get(conf_side, {}).get(kind, [])
                assert claims.get(jwt_side, {}).get(kind, []) == expected, (entry["user"], conf_side, kind)
        assert len(claims.get("pub", {}).get("allow", [])) > 0


def test_continuity_exports_what_auth_conf_exports_and_keeps_jetstream_bounded() -> None:
    claims = layout.continuity_account("ACONT")["nats"]
    exported = {e["subject"]: e.get("response_type") for e in claims["exports"]}
    assert exported["$JS.API.CONSUMER.MSG.NEXT.CONTINUITY_DECISIONS.*"] == "Stream"
    assert "continuity.sessions.*.decide" in exported and "continuity.events.*.*" in exported
    assert claims["limits"]["max_bytes_required"] is True and claims["limits"]["disk_storage"] == -1
    assert "imports" not in claims  # the archiver's moves go out from ARCHIVE
    assert claims["limits"]["conn"] == -1  # a limit left out would read as zero


def test_a_runner_account_holds_the_template_and_nothing_else() -> None:
    account, user = layout.runner_claims("r-1", "ARUN", "UUSER", "ACONT")
    block = conf.loads(account_block("r-1", "UUSER"))["RUNNER_r-1"]
    permissions = block["users"][0]["permissions"]
    imported = [i["subject"] for i in account["nats"]["imports"]]
    assert imported == [i["service"]["subject"] for i in block["imports"]]
    assert sorted(imported) == sorted(user["nats"]["pub"]["allow"]) == sorted(permissions["publish"]["allow"])
    assert all(i["account"] == "ACONT" for i in account["nats"]["imports"])
    assert user["nats"]["sub"] == {"allow": ["_INBOX.r-1.>", "continuity.runner.r-1.archive"]}
    assert user["nats"]["resp"] == {"max": 1, "ttl": 60 * 10**9}
    assert account["nats"]["limits"]["payload"] == RUNNER_MAX_PAYLOAD
    assert "disk_storage" not in account["nats"]["limits"]  # no JetStream of its own
    assert [e["subject"] for e in account["nats"]["exports"]] == ["continuity.runner.r-1.archive"]


def test_archive_imports_each_active_runner_and_exports_nothing() -> None:
    claims = layout.archive_account("AARCH", {"b": "AB", "a": "AA"})["nats"]
    assert [(i["subject"], i["account"]) for i in claims["imports"]] == [
        ("continuity.runner.a.archive", "AA"),
        ("continuity.runner.b.archive", "AB"),
    ]
    assert "exports" not in claims  # nothing whose replies a change of ARCHIVE could drop
    assert layout.ARCHIVE_RULES["publish"] == {"allow": ["continuity.runner.*.archive"]}


def _user_claims(creds: Path) -> dict[str, object]:
    token = creds.read_text().split("-----BEGIN NATS USER JWT-----")[1].split("------END")[0].strip()
    body = token.split(".")[1]
    claims: dict[str, object] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return claims


def test_nats_init_builds_the_accounts_from_the_auth_conf_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from continuity.cli.main import main

    given = tmp_path / "auth.conf"
    rules = layout.AUTH_CONF.read_text()
    marker = '"continuity.history.>"'
    assert marker in rules
    given.write_text(rules.replace(marker, marker + '\n      "continuity.named-here.>"', 1))
    assert main(["nats", "init", str(tmp_path / "op"), "--auth-conf", str(given)]) == 0
    claims = _user_claims(tmp_path / "op" / "creds" / "reconciliation.creds")
    allowed = claims["nats"]["pub"]["allow"]  # type: ignore[index]
    assert "continuity.named-here.>" in allowed and "continuity.history.>" in allowed
    # A file that is not there: refused, and no folder is made.
    missing = tmp_path / "absent.conf"
    assert main(["nats", "init", str(tmp_path / "op2"), "--auth-conf", str(missing)]) == 2
    assert "invalid_argument" in capsys.readouterr().err
    assert not (tmp_path / "op2").exists()
