"""The sources of one run: numbered once, in the order found, however often they are found."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from service.domain import ScoredChunk, Source


class SourceBook:
    """Gives each distinct chunk of a run its citation number (1, 2, ...).

    Also a container of the valid citation numbers, for :class:`CitationFilter`.
    """

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._sources: list[Source] = []

    def add(self, hits: Iterable[ScoredChunk]) -> list[Source]:
        """Numbers new chunks and returns every hit as a source, in the order given.

        A chunk found again keeps its number; its best score is kept.
        """
        found: list[Source] = []
        for hit in hits:
            number = self._numbers.get(hit.chunk.chunk_id)
            if number is None:
                number = len(self._sources) + 1
                self._numbers[hit.chunk.chunk_id] = number
                self._sources.append(Source(hit, number))
            elif hit.score > self._sources[number - 1].hit.score:
                self._sources[number - 1] = Source(hit, number)
            found.append(Source(hit, number))
        return found

    def __contains__(self, number: object) -> bool:
        return isinstance(number, int) and 1 <= number <= len(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def all(self) -> list[Source]:
        """Every source of the run so far, by number."""
        return list(self._sources)

    def get(self, number: int) -> Source:
        return self._sources[number - 1]

    def final(self, cited: Sequence[int]) -> list[Source]:
        """Cited sources first, by number, then the others with citation 0."""
        chosen = set(cited)
        first = [s for s in self._sources if s.citation in chosen]
        rest = [Source(s.hit, 0) for s in self._sources if s.citation not in chosen]
        return first + rest

    def confidence(self, cited: Sequence[int]) -> float:
        """0.6 x the best score of the cited sources + 0.4 x their mean; 0 if none cited."""
        scores = [self._sources[n - 1].hit.score for n in set(cited) if n in self]
        if not scores:
            return 0.0
        return 0.6 * max(scores) + 0.4 * (sum(scores) / len(scores))
