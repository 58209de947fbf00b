"""Test help for prompts whose markers carry a random code (service.agent.boundaries)."""

from __future__ import annotations

import re

_CODED = re.compile(r"<(/?)(passages|caller_instructions)-[0-9a-f]{12}>")


def plain(text: str) -> str:
    """``text`` with each run-coded marker written as the plain one, to compare exactly."""
    return _CODED.sub(r"<\1\2>", text)


def code_of(text: str) -> str:
    """The code of the first coded marker in ``text``."""
    found = re.search(r"<passages-([0-9a-f]{12})>", text)
    assert found is not None, text
    return found.group(1)
