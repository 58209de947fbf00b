"""Reading the model's tool calls: anything it sends becomes arguments or a readable error."""

from __future__ import annotations

import pytest

from service.agent.tools import RetrievalArguments, format_sources, parse_call, server_call_id
from service.domain import ScoredChunk, Source
from tests.agent.support import SERVER_CALL_ID, chunk


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"query": "links"}', RetrievalArguments("links", 5)),
        ('{"query": "  links  ", "top_k": 3}', RetrievalArguments("links", 3)),
        ('{"query": "links", "top_k": 10.0}', RetrievalArguments("links", 10)),
        ('{"query": "links", "top_k": null}', RetrievalArguments("links", 5)),
        ('{"query": "links", "extra": 1}', RetrievalArguments("links", 5)),
    ],
)
def test_valid_arguments(raw: str, expected: RetrievalArguments) -> None:
    parsed = parse_call("qdrant_retrieval", raw)
    assert parsed.arguments == expected
    assert parsed.error == ""


@pytest.mark.parametrize(
    ("raw", "error", "recorded"),
    [
        ("{query: x", "not valid JSON", {"raw": "{query: x"}),
        ('["links"]', "must be a JSON object", {"raw": '["links"]'}),
        ("", "'query' is required", {}),
        ('{"query": ""}', "'query' is required", {"query": ""}),
        ('{"query": 42}', "'query' is required", {"query": 42}),
        ('{"query": "x", "top_k": 0}', "between 1 and 10, not 0", None),
        ('{"query": "x", "top_k": 11}', "between 1 and 10, not 11", None),
        ('{"query": "x", "top_k": 2.5}', "must be an integer", None),
        ('{"query": "x", "top_k": true}', "must be an integer", None),
        ('{"query": "x", "top_k": "3"}', "must be an integer", None),
        ('{"query": "' + "x" * 1001 + '"}', "at most 1000 characters", None),
    ],
)
def test_invalid_arguments(raw: str, error: str, recorded: dict[str, object] | None) -> None:
    parsed = parse_call("qdrant_retrieval", raw)
    assert parsed.arguments is None
    assert error in parsed.error
    if recorded is not None:
        assert parsed.recorded == recorded


def test_results_are_numbered_for_the_model() -> None:
    link = chunk("l", "  Links are rigid.  ", title="URDF", heading="Links", url="https://u")
    text = format_sources([Source(ScoredChunk(link, 0.9), 4)])
    assert text == "<passages>\n[4] URDF > Links (https://u)\nLinks are rigid.\n</passages>"
    assert "No passage" in format_sources([])


def test_server_call_ids_are_recognisable_and_unique() -> None:
    ids = {server_call_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(SERVER_CALL_ID.match(i) for i in ids)
