"""``ragagent sessions new-key``: one KEY_ID:BASE64_KEY entry on stdout that the setting
accepts as it is, first in a rotated list too."""

from __future__ import annotations

import re

import pytest

from service.cli import main
from service.sessions.sealing import Content


def test_new_key_prints_an_entry_the_setting_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "new-key", "--id", "2026-11"]) == 0
    entry = capsys.readouterr().out.strip()
    assert entry.startswith("2026-11:")
    assert main(["sessions", "new-key"]) == 0  # default id: today's date
    older = capsys.readouterr().out.strip()
    assert re.fullmatch(r"\d{8}:[A-Za-z0-9+/]{43}=", older)
    content = Content.from_key(record=True, key=f"{entry},{older}")
    assert content.cipher is not None
    assert content.cipher.active == "2026-11"
    assert content.open(content.seal("text", "turn", "question"), "turn", "question") == "text"


def test_a_bad_key_id_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "new-key", "--id", "has space"]) == 2
    assert "--id" in capsys.readouterr().err
