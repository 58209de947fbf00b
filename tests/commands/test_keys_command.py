"""``ragagent keys``: the key is printed once, alone on the last line; the file keeps only
its hash, is private to its owner, and is replaced whole on every change."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from service.cli import main
from service.security.apikeys import KeyRing, read_records, split_key


def _create(capsys: pytest.CaptureFixture[str], keys: Path, *argv: str) -> str:
    assert main(["keys", "create", "--file", str(keys), *argv]) == 0
    return capsys.readouterr().out.splitlines()[-1]


def test_create_prints_the_key_once_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "secrets" / "keys.jsonl"
    key = _create(capsys, keys, "--principal", "ci", "--role", "corpus:write", "--role", "ask")
    assert key.startswith("rak_")
    text = keys.read_text()
    assert key not in text
    # The secret is what follows the id; it may itself hold "_" (URL-safe base64).
    parts = split_key(key)
    assert parts is not None
    assert parts[1] not in text
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    (record,) = read_records(keys)
    assert (record.principal, record.roles, record.revoked) == ("ci", ["ask", "corpus:write"], None)
    ring = KeyRing(keys)
    ring.refresh()
    principal = ring.verify(key)
    assert principal is not None
    assert principal.name == "ci"
    assert principal.credential_id == record.id
    assert ring.verify(key[:-1] + ("A" if key[-1] != "A" else "B")) is None


def test_revoke_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys.jsonl"
    first = _create(capsys, keys, "--principal", "a", "--role", "ask")
    _create(capsys, keys, "--principal", "b", "--role", "admin")
    key_id = first.split("_")[1]
    assert main(["keys", "revoke", key_id, "--file", str(keys)]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--file", str(keys)]) == 0
    listing = capsys.readouterr().out
    assert f"{key_id}  a  ask" in listing
    assert "revoked" in listing
    assert "active" in listing
    assert first not in listing
    ring = KeyRing(keys)
    ring.refresh()
    assert ring.verify(first) is None
    assert main(["keys", "revoke", "000000000000", "--file", str(keys)]) == 1


def test_an_unknown_role_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys.jsonl"
    code = main(["keys", "create", "--file", str(keys), "--principal", "x", "--role", "root"])
    assert code == 2
    assert "unknown role 'root'" in capsys.readouterr().err
    assert not keys.exists()


def test_a_damaged_file_keeps_the_keys_the_server_had(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    from service.security.apikeys import create_key

    _, key = create_key(keys, "a", ["ask"])
    ring = KeyRing(keys)
    ring.refresh()
    keys.write_text(keys.read_text() + "{not json\n")
    assert ring.refresh() is False
    assert ring.verify(key) is not None
