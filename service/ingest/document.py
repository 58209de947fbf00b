"""The parsed form of a page: metadata plus sections of text blocks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["paragraph", "code", "table"]


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph (list items included), a fenced code block, or a table as text rows."""

    kind: BlockKind
    text: str
    language: str = ""

    def render(self) -> str:
        """The block as it is shown to readers: code keeps its fences and language."""
        if self.kind == "code":
            return f"```{self.language}\n{self.text}\n```"
        return self.text


@dataclass(slots=True)
class Section:
    """The blocks under one heading; ``path`` lists the headings below the title, outermost
    first (empty for the text before the first heading)."""

    path: tuple[str, ...]
    level: int
    blocks: list[Block] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """One page: its metadata and its sections in reading order."""

    title: str
    sections: tuple[Section, ...]
    description: str = ""
    slug: str | None = None
    sidebar_position: float | None = None
    tags: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
