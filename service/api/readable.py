"""A session's stored sources, checked again against what its reader may read now.

A turn keeps the chunks its answer was built from. Permissions change after the fact (a
document relabelled, a key's groups narrowed), so GetSession shows a turn's sources only
when the caller may still read their documents; a turn that *cites* one it may not has its
answer withheld as well, since the answer quotes it. A document deleted since cannot be
checked and counts as unreadable. Without authentication, and for admins, nothing is
withheld (the caller reads everything).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from service.access import ReadAccess
from service.domain import Deadline
from service.sessions.records import SessionRecord, TurnRecord

WITHHELD = "[answer withheld: it cites documents you may no longer read]"


class DocumentLabels(Protocol):
    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]: ...


class DocumentsReadable:
    """Filters session records by the documents their reader may read."""

    def __init__(self, store: DocumentLabels, *, unlabelled_public: bool) -> None:
        self._store = store
        self.unlabelled_public = unlabelled_public

    async def filter(
        self, record: SessionRecord, access: ReadAccess | None, deadline: Deadline | None
    ) -> SessionRecord:
        if access is None or not any(turn.sources for turn in record.turns):
            return record
        labels = await self._store.document_access(deadline=deadline)
        readable = {doc for doc, held in labels.items() if access.permits(held)}
        return replace(record, turns=[_turn(turn, readable) for turn in record.turns])


def _turn(turn: TurnRecord, readable: set[str]) -> TurnRecord:
    kept = [s for s in turn.sources if s.hit.chunk.document_id in readable]
    if len(kept) == len(turn.sources):
        return turn
    cites_hidden = any(s.citation and s.hit.chunk.document_id not in readable for s in turn.sources)
    return replace(turn, sources=kept, answer=WITHHELD if cites_hidden else turn.answer)
