"""docs/contract-promises.md names, for each promise of the protos, the test that holds it:
every test it names exists, and every field the protos added for issue 13 has a row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = (ROOT / "docs" / "contract-promises.md").read_text()
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_named_test_exists() -> None:
    named = REFERENCE.findall(TABLE)
    assert len(named) > 100
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (ROOT / path).exists() or name not in _tests_in(ROOT / path)
    ]
    assert not missing, f"docs/contract-promises.md names tests that do not exist: {missing}"


def test_every_row_names_a_test() -> None:
    rows = [line for line in TABLE.splitlines() if line.startswith("| `")]
    sections = TABLE.split("\n## ")
    promise_rows = [
        line
        for section in sections
        if section.split("\n", 1)[0].endswith(".proto")
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    assert rows
    assert all(REFERENCE.search(line) for line in promise_rows), "a promise without a test"


def test_the_new_fields_have_rows() -> None:
    for element in (
        "QuestionRequest.model",
        "QuestionRequest.max_tokens",
        "QuestionRequest.instructions",
        "QuestionRequest.metadata",
        "AgentResponse.turn_id",
        "Turn.error",
        "Turn.metadata",
        "TOOL_CALL_STATUS_PENDING",
        "RESPONSE_STATUS_ERROR",
        "RESPONSE_STATUS_CANCELLED",
    ):
        assert f"`{element}`" in TABLE, element
