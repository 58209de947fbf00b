"""The README and docs/configuration.md: the settings table is the Settings class, the
README's first lines are the two commands, and its commands work as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from service.config import describe_settings
from tests.corpus.support import write_pages
from tests.helpers import local_embedder
from tests.processes import command_env, server_process

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
VENV_BIN = Path(sys.executable).parent


def test_the_configuration_page_lists_every_setting_with_its_description() -> None:
    table = CONFIGURATION.split("<!-- settings:start -->")[1].split("<!-- settings:end -->")[0]
    for env, _default, description in describe_settings():
        assert f"`{env}`" in table, f"docs/configuration.md lacks {env}"
        assert description in table, f"docs/configuration.md's description of {env} is stale"
    listed = set(re.findall(r"^\| `(RAGAGENT_[A-Z0-9_]+)`", table, flags=re.MULTILINE))
    assert listed == {env for env, _, _ in describe_settings()}, "a row for a removed setting"


def test_readme_starts_with_the_two_set_up_commands() -> None:
    head = "\n".join(README.splitlines()[:8])
    assert "make demo" in head
    assert "make test" in head


def test_serve_help_lists_every_setting() -> None:
    from service.cli import build_parser

    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    help_text = serve.format_help()
    for env, _default, _description in describe_settings():
        assert env in help_text


# --- the README's commands, run as written against a real server ------------------------

# Lines of the README's shell blocks that this test runs; the others need what a test
# cannot have (`make demo` is tested on its own, model endpoints need a model).
RUNNABLE = ("ragagent ", ".venv/bin/ragagent ", "grpcurl ", "buf curl ")
README_ADDRESS = "127.0.0.1:50051"
README_CORPUS = "../shared/corpus/physical-ai-book/docs"


def readme_commands() -> list[str]:
    """Every runnable command line of the README's ``sh`` blocks, comments removed."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [
        shlex.join(shlex.split(line, comments=True)) for line in lines if line.startswith(RUNNABLE)
    ]


def _argv(command: str, address: str, corpus: Path) -> list[str]:
    """The command with this test's tools, server and corpus in place of the README's."""
    argv = [
        word.replace(README_ADDRESS, address).replace(README_CORPUS, str(corpus))
        for word in shlex.split(command)
    ]
    tool = argv[0].removeprefix(".venv/bin/")
    if tool == "ragagent":
        return [sys.executable, "-m", "service.cli", *argv[1:]]
    return [str(VENV_BIN / tool), *argv[1:]]


def test_the_readme_has_the_commands_this_test_runs() -> None:
    commands = readme_commands()
    kinds = {c.split()[0].removeprefix(".venv/bin/") + " " + c.split()[1] for c in commands}
    assert {"ragagent ingest", "ragagent serve", "ragagent ask", "grpcurl -plaintext"} <= kinds
    assert "buf curl" in kinds
    assert all("--protocol grpc" in c for c in commands if c.startswith("buf curl"))


@pytest.mark.slow
def test_every_readme_command_works_against_a_real_server(tmp_path: Path) -> None:
    local_embedder()  # skips where the model is not provisioned
    for tool in ("grpcurl", "buf"):
        if not (VENV_BIN / tool).is_file():
            pytest.skip(f"{tool} is not installed in .venv/bin: run `make setup`")
    corpus = write_pages(tmp_path / "docs")
    data = tmp_path / "data"
    commands = readme_commands()
    ingests = [c for c in commands if " ingest " in c]
    others = [c for c in commands if " ingest " not in c and not c.endswith(" serve")]

    def run(command: str, address: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            _argv(command, address, corpus),
            cwd=ROOT,
            env=command_env(data, address=address),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done

    for command in ingests:  # before the server: the embedded store is single-process
        run(command, README_ADDRESS)
    with server_process(data, log_format="json", embedding_threads="2") as server:
        printed = {command: run(command, server.target).stdout for command in others}
    listed = next(out for command, out in printed.items() if command.endswith(" list"))
    assert "ragagent.v1.AgentService" in listed
    retrieved = [json.loads(out) for command, out in printed.items() if "Retrieve" in command]
    assert len(retrieved) == 2  # grpcurl's and buf curl's
    assert all(r["sources"] for r in retrieved)


@pytest.mark.slow
def test_ask_json_has_the_field_names_grpcurl_prints(tmp_path: Path) -> None:
    local_embedder()
    if not (VENV_BIN / "grpcurl").is_file():
        pytest.skip("grpcurl is not installed in .venv/bin: run `make setup`")
    corpus = write_pages(tmp_path / "docs")
    data = tmp_path / "data"
    env = command_env(data)
    question = "What does URDF describe?"
    ingest = subprocess.run(
        [sys.executable, "-m", "service.cli", "ingest", str(corpus)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert ingest.returncode == 0
    with server_process(data, log_format="json", embedding_threads="2") as server:
        address = server.target
        ask = [sys.executable, "-m", "service.cli", "ask", "--address", address, "--json"]
        ours = subprocess.run(
            [*ask, question], cwd=ROOT, env=env, capture_output=True, timeout=60, check=True
        )
        grpcurl = [str(VENV_BIN / "grpcurl"), "-plaintext", "-d", json.dumps({"query": question})]
        theirs = subprocess.run(
            [*grpcurl, address, "ragagent.v1.AgentService/Ask"],
            capture_output=True,
            timeout=60,
            check=True,
        )
    mine, grpcurl_printed = json.loads(ours.stdout), json.loads(theirs.stdout)
    assert _shape(mine) == _shape(grpcurl_printed)


def _shape(value: object) -> object:
    """The keys at every depth and the JSON type of every value, not the values."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value[:1]]
    return type(value).__name__
