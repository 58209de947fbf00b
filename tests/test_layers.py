"""The layers of service/ point down: a module imports only from layers below its own (or from
its own package). docs/architecture.md draws the same table; change both together.

Every import counts, at module level or inside a function, under TYPE_CHECKING or not: a
deferred import is still a dependency. The few upward imports that remain are listed in
ALLOWED with the reason and the work that removes them; an entry that no longer matches an
import fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service"

# Top to bottom. A module belongs to the longest prefix listed; modules under one prefix may
# import each other; otherwise an import must go to a lower row. Peers in a row are
# independent of each other.
LAYERS: list[tuple[str, ...]] = [
    ("service.cli",),
    ("service.commands",),
    ("service.server",),  # the composition root: serves a runtime ...
    ("service.runtime",),  # ... which builds the components from Settings
    ("service.configs",),  # Settings -> each component's own config
    ("service.wiring",),  # security chain and observability wrappers the root applies
    ("service.config",),  # Settings: read by the root and the commands only
    ("service.http",),  # Connect, gRPC-Web and JSON over HTTP, through the same interceptor chain
    ("service.api",),  # servicers and interceptors: proto <-> domain
    (  # observability's wrappers: metrics and spans around a lower layer's objects
        "service.observability.instruments",
        "service.observability.model_calls",
        "service.observability.runs",
    ),
    ("service.agent", "service.sessions", "service.security"),
    ("service.ingest", "service.evaluation"),
    ("service.fleet",),  # what replicas share: the corpus write lease, fleet-wide limits
    ("service.retrieval",),
    ("service.text",),  # sentences and pieces of plain text
    ("service.openai_errors", "service.datadir", "service.provision"),
    ("service.observability",),  # the base: logging, request ids, metric and span setup
    ("service.domain", "service.errors", "service.executor"),
    ("service.access", "service.owners"),  # document labels and who may read them; owner ids
]

# (importer prefix, imported prefix) -> why it is still allowed, naming its way out. Empty:
# every import points down; an entry here must say why it cannot yet.
ALLOWED: dict[tuple[str, str], str] = {}


def _layer_of(module: str) -> tuple[int, str]:
    """(row, prefix) of the longest listed prefix of ``module``."""
    best: tuple[int, str] | None = None
    for row, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (row, prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return best


def _modules() -> list[tuple[Path, str]]:
    """service/'s modules (the empty package file service/__init__.py is no layer's)."""
    named = [(path, _module_name(path)) for path in sorted(SERVICE.rglob("*.py"))]
    return [(path, module) for path, module in named if module != "service"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SERVICE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """The service modules (and possibly names in them) that ``source`` imports."""
    tree = ast.parse(source)
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            # `from service import x` / `from service.pkg import module`
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "service" or name.startswith("service.")}


def _edges() -> dict[tuple[str, str], list[str]]:
    """(importer prefix, imported prefix) -> "module -> module" lines, upward ones only."""
    upward: dict[tuple[str, str], list[str]] = {}
    for path, module in _modules():
        row, prefix = _layer_of(module)
        source = path.read_text(encoding="utf-8")
        for target in sorted(_imports(source, module, is_package=path.name == "__init__.py")):
            try:
                target_row, target_prefix = _layer_of(target)
            except AssertionError:
                continue  # `from service.pkg import name`: the name is not a module
            if target_prefix == prefix or target_row > row:
                continue
            upward.setdefault((prefix, target_prefix), []).append(f"{module} -> {target}")
    return upward


def test_every_module_of_service_has_a_layer() -> None:
    for _, module in _modules():
        _layer_of(module)


def test_no_module_imports_a_layer_above_its_own_or_a_peer() -> None:
    upward = _edges()
    unexplained = {edge: lines for edge, lines in upward.items() if edge not in ALLOWED}
    assert not unexplained, "imports against the layers (docs/architecture.md):\n" + "\n".join(
        line for lines in unexplained.values() for line in lines
    )


def test_every_allowed_exception_is_still_needed() -> None:
    stale = set(ALLOWED) - set(_edges())
    assert not stale, f"no longer imported, remove from ALLOWED: {sorted(stale)}"


def _upward(module: str, source: str) -> list[str]:
    row, prefix = _layer_of(module)
    return sorted(
        target
        for target in _imports(source, module)
        if (layer := _layer_of(target))[1] != prefix and layer[0] <= row
    )


def test_the_check_sees_upward_peer_and_relative_imports() -> None:
    """The checker itself, on sources that are not in the tree."""
    probe = "service.retrieval.probe"
    assert _upward(probe, "from service.agent import run\nimport service.api.agent\n") == [
        "service.agent",
        "service.agent.run",
        "service.api.agent",
    ]
    assert _upward("service.agent.probe", "from service.sessions import store\n") == [
        "service.sessions",
        "service.sessions.store",
    ]
    assert _upward(probe, "from ..agent import run\n") == ["service.agent", "service.agent.run"]
    assert _upward(probe, "from . import base\nfrom service.domain import Chunk\n") == []
