"""``ragagent ingest``: in this process and through a server, reports, exit codes."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import protovalidate
import pytest

from service.api.corpus import MAX_WARNINGS, IngestTally, ingest_response
from service.config import Settings
from service.ingest.outcome import IngestSummary
from tests.commands.support import run
from tests.corpus.support import BASE_URL, PAGES, corpus_server, settings_for, write_pages
from tests.helpers import local_embedder

REPO = Path(__file__).resolve().parents[2]
COUNTS = ("added", "updated", "unchanged", "deleted")


def _settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path / "data")


def _counts(report: dict[str, object]) -> tuple[object, ...]:
    return tuple(report[name] for name in COUNTS)


async def test_local_ingest_reports_json_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    settings = _settings(tmp_path)
    first = await run(settings, "ingest", str(docs), "--base-url", BASE_URL, "--json")
    second = await run(settings, "ingest", str(docs), "--base-url", BASE_URL, "--json")
    assert (first.code, first.err) == (0, "")
    report = first.json()
    assert _counts(report) == (5, 0, 0, 0)
    assert report["chunks_written"] >= 5
    assert report["chunks_deleted"] == 0
    assert report["duration_s"] > 0
    assert isinstance(report["warnings"], list)
    assert second.code == 0
    assert _counts(second.json()) == (0, 0, 5, 0)
    assert second.json()["chunks_written"] == 0


async def test_local_ingest_prints_a_table_and_prunes(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    settings = _settings(tmp_path)
    await run(settings, "ingest", str(docs))
    (docs / "intro.md").unlink()
    pruned = await run(settings, "ingest", str(docs), "--prune", tty=True)
    assert pruned.code == 0
    assert "documents" in pruned.out  # the progress bar, on a terminal only
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", pruned.out)
    rows = {
        cells[0].strip(): cells[1].strip()
        for line in plain.splitlines()
        if len(cells := line.strip("│").split("│")) == 2
    }
    assert rows["deleted"] == "1"
    assert rows["unchanged"] == "4"
    assert rows["warnings"] == "0"


async def test_ingest_through_a_running_server(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    async with corpus_server(tmp_path / "server") as srv:
        address = ("--address", srv.address)
        first = await run(
            srv.settings, "ingest", str(docs), "--base-url", BASE_URL, *address, "--json"
        )
        again = await run(srv.settings, "ingest", str(docs), "--base-url", BASE_URL, *address)
        listed = await srv.list_all()
    assert (first.code, first.err) == (0, "")
    assert _counts(first.json()) == (5, 0, 0, 0)
    assert first.json()["duration_s"] > 0
    assert again.code == 0
    assert "unchanged" in again.out
    assert sorted(d.document_id for d in listed) == sorted(PAGES)
    assert all(d.url.startswith(BASE_URL) for d in listed)


async def test_server_side_validation_errors_list_the_fields(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs", {"intro.md": "# Intro\n\ntext", "odd\\name.md": "# Odd"})
    async with corpus_server(tmp_path / "server") as srv:
        result = await run(srv.settings, "ingest", str(docs), "--address", srv.address)
    assert result.code == 1
    first, *fields = result.err.splitlines()
    assert first.startswith("ragagent: INVALID_ARGUMENT: ")
    assert len(fields) == 1
    assert fields[0].startswith("  [1].document.path: ")


async def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await run(_settings(tmp_path), "ingest", str(docs), "--address", f"127.0.0.1:{port}")
    assert result.code == 1
    assert result.err.startswith("ragagent: UNAVAILABLE: ")
    assert len(result.err.splitlines()) == 1
    assert result.out == ""


async def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    missing = await run(settings, "ingest", str(tmp_path / "nowhere"))
    docs = write_pages(tmp_path / "docs")
    bad_url = await run(settings, "ingest", str(docs), "--base-url", "ftp://robots.example/")
    a_file = await run(settings, "ingest", str(docs / "intro.md"))
    assert missing.code == bad_url.code == a_file.code == 2
    assert missing.err == f"ragagent: {tmp_path / 'nowhere'}: no such folder\n"
    assert a_file.err == (
        f"ragagent: {docs / 'intro.md'} is a file; ingest takes the folder of the documents "
        "(PATH)\n"
    )
    assert bad_url.err.startswith("ragagent: --base-url: ")
    assert len(bad_url.err.splitlines()) == 1
    assert not (tmp_path / "data").exists()  # nothing was opened


async def test_a_file_that_is_not_utf8_is_skipped_and_counted_either_way(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    (docs / "zz-broken.md").write_bytes(b"# Broken\n\n\xff\xfe text")
    local = await run(_settings(tmp_path), "ingest", str(docs), "--prune", "--json")
    async with corpus_server(tmp_path / "server") as srv:
        indexed = write_pages(tmp_path / "indexed")
        await run(srv.settings, "ingest", str(indexed), "--address", srv.address)
        (indexed / "zz-broken.md").write_bytes(b"\xff")
        (indexed / "intro.md").unlink()
        remote = await run(
            srv.settings, "ingest", str(indexed), "--address", srv.address, "--prune", "--json"
        )
        table = await run(srv.settings, "ingest", str(indexed), "--address", srv.address)
        listed = await srv.list_all()
    for result, counts in ((local, (5, 0, 0, 0)), (remote, (0, 0, 4, 1))):
        assert (result.code, result.err) == (0, "")
        report = result.json()
        assert _counts(report) == counts
        assert report["skipped"] == 1
        assert report["warnings"] == [
            "zz-broken.md: not valid UTF-8 (byte "
            + ("10" if result is local else "0")
            + ": b'\\xff'); skipped"
        ]
    assert "skipped" in table.out
    assert "zz-broken.md: not valid UTF-8" in table.out
    assert sorted(d.document_id for d in listed) == sorted(set(PAGES) - {"intro.md"})


async def test_links_out_of_the_folder_are_read_only_when_asked(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs")
    private = write_pages(tmp_path / "private", {"notes.md": "# Notes\n\nThe root password."})
    (docs / "notes.md").symlink_to(private / "notes.md")
    settings = _settings(tmp_path)
    default = await run(settings, "ingest", str(docs), "--json")
    followed = await run(settings, "ingest", str(docs), "--json", "--follow-symlinks")
    assert default.json()["added"] == 5
    assert default.json()["skipped"] == 1
    assert default.json()["warnings"] == [
        "notes.md: links to a file outside PATH; skipped (--follow-symlinks reads it)"
    ]
    assert (followed.json()["added"], followed.json()["skipped"]) == (1, 0)


async def test_parser_warnings_are_reported_either_way(tmp_path: Path) -> None:
    docs = write_pages(tmp_path / "docs", {**PAGES, "bad.md": "---\na: [\n---\nText.\n"})
    local = await run(_settings(tmp_path), "ingest", str(docs), "--json")
    async with corpus_server(tmp_path / "server") as srv:
        remote = await run(srv.settings, "ingest", str(docs), "--address", srv.address, "--json")
    for result in (local, remote):
        assert result.code == 0
        (warning,) = result.json()["warnings"]
        assert warning.startswith("bad.md: invalid YAML")
        assert result.json()["skipped"] == 0


def test_the_response_keeps_within_its_warning_limits() -> None:
    summary = IngestSummary(warnings=[f"p{i}.md: " + "x" * 3000 for i in range(1500)])
    response = ingest_response(summary, IngestTally(), duration_s=1.0)
    protovalidate.validate(response)  # the contract's own limits
    assert len(response.warnings) == MAX_WARNINGS
    assert response.warnings[0].startswith("p0.md: xxx")
    assert response.warnings[-1] == "… and 501 more warnings (in the server log)"


@pytest.mark.slow
def test_the_command_keeps_stdout_for_the_report(tmp_path: Path) -> None:
    local_embedder()  # skips where the model is not provisioned
    docs = write_pages(tmp_path / "docs")
    # What `ragagent ingest` runs, with the parser built here (cli.py registers it later).
    script = textwrap.dedent(
        """
        import argparse, asyncio, sys
        from service.commands import ingest
        parser = argparse.ArgumentParser(prog="ragagent")
        ingest.register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(sys.argv[1:])
        sys.exit(asyncio.run(args.run(args)))
        """
    )
    env = {**os.environ, "RAGAGENT_DATA_DIR": str(tmp_path / "data"), "RAGAGENT_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-c", script, "ingest", str(docs), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # one JSON object and nothing else
    assert report["added"] == 5
    assert "runtime ready" in done.stderr  # the logs went to stderr
