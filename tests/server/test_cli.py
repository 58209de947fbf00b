"""The command-line client and the demo, as a newcomer runs them."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from ragagent.v1 import agent_pb2

from service.cli import main
from service.commands.ask import run_ask, stream_answer
from tests.helpers import add_documents, local_embedder, make_chunk, running_server

ROOT = Path(__file__).resolve().parents[2]


async def test_stream_answer_prints_deltas_then_cited_sources(tmp_path: Path) -> None:
    docs = [
        make_chunk(
            "m/urdf.md",
            "URDF is an XML format that describes links and joints.",
            title="URDF",
            url="https://book.dev/docs/m/urdf",
        )
    ]
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, docs)
        out = io.StringIO()
        final = await stream_answer(
            srv.channel, agent_pb2.QuestionRequest(query="What is URDF?"), out=out, deadline_s=30
        )
    printed = out.getvalue()
    assert final.answer in printed
    assert "[1] URDF" in printed
    assert "https://book.dev/docs/m/urdf" in printed
    assert "status SUCCESS" in printed


async def test_ask_command_reports_an_unreachable_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(
        question="What is URDF?",
        address="127.0.0.1:9",
        session="",
        max_results=None,
        timeout=3.0,
        user="",
        json=False,
    )
    assert await run_ask(args) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_ingests_serves_and_streams_a_cited_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local_embedder()  # skips where the model is not provisioned
    monkeypatch.chdir(ROOT)
    code = main(["demo", "--data-dir", str(tmp_path), "How does the server shut down?"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "ingested docs" in printed
    # Cited: which source comes first depends on what docs/ holds today.
    assert re.search(r"\[\d+\]", printed), printed
    assert "status SUCCESS" in printed


def _ragagent(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ragagent ARGV`` as a user runs it, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *argv],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_version_prints_the_installed_package_version() -> None:
    done = _ragagent("--version")
    assert done.returncode == 0
    assert done.stdout == f"ragagent {version('ragagent')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ("ask", "--address", "nonsense", "What is URDF?"),
        ("health", "--address", "nonsense"),
        ("serve", "--address", "nonsense"),
        ("ingest", "docs", "--address", "nonsense"),
        ("eval", "tests/eval/questions.jsonl", "--address", "nonsense"),
    ],
    ids=lambda argv: argv[0],
)
def test_a_bad_flag_is_named_as_the_flag_with_its_value(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err == "ragagent: --address 'nonsense': must be HOST:PORT, e.g. 127.0.0.1:50051\n"


def test_a_bad_environment_setting_is_still_named_as_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGAGENT_ADDRESS", "nonsense")
    assert main(["health"]) == 2
    assert "invalid setting RAGAGENT_ADDRESS='nonsense'" in capsys.readouterr().err
    # A good flag overrides a bad environment variable.
    assert main(["health", "--address", "127.0.0.1:9", "--timeout", "0.5"]) == 1


def test_demo_names_the_corpus_flag_for_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n")
    code = main(["demo", "--corpus", str(page), "--data-dir", str(tmp_path / "data")])
    assert code == 2
    assert capsys.readouterr().err == f"ragagent: --corpus {page}: is a file, not a folder\n"


def _keys(value: object) -> set[str]:
    """Every key of a JSON document, at every depth."""
    if isinstance(value, dict):
        return set(value) | {k for item in value.values() for k in _keys(item)}
    if isinstance(value, list):
        return {k for item in value for k in _keys(item)}
    return set()


async def test_ask_json_uses_the_proto_field_names_like_grpcurl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [make_chunk("m/urdf.md", "URDF is an XML format that describes links and joints.")]
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, docs)
        args = argparse.Namespace(
            question="What is URDF?",
            address=srv.target,
            session="",
            max_results=None,
            timeout=30.0,
            user="",
            json=True,
        )
        assert await run_ask(args) == 0
    out = capsys.readouterr().out
    # Between the in-process server's log lines (the real command logs to stderr).
    printed, _end = json.JSONDecoder().raw_decode(out, out.index("{\n"))
    assert {"request_id", "session_id", "answer_mode", "tool_calls"} <= set(printed)
    assert not [k for k in _keys(printed) if k != k.lower()], "camelCase keys"
    arguments = printed["tool_calls"][0]["arguments"]
    assert arguments["top_k"] == 5
    assert isinstance(arguments["top_k"], int)  # not 5.0: grpcurl prints Struct numbers so
    assert printed["sources"][0]["citation"] == 1
