"""Who may read a document, and what a caller may read: labels on chunks, grants of callers.

A document carries *labels*, stored on every one of its chunks (payload field ``access``,
a keyword index) and on its record: ``g:<group>`` for each group and ``p:<principal>`` for
each principal granted, ``g:*`` for "every authenticated caller", and :data:`ADMIN_ONLY`
for a document whose front matter could not be read (so that a broken label never widens
who sees it). A document with no label is *unlabelled*.

A caller reads through a :class:`ReadAccess`: the labels that grant it (its groups, its
name, ``g:*``) and whether unlabelled documents are visible to it (the operator's
``RAGAGENT_ACCESS_UNLABELLED``). The stores turn it into a condition of the engine's own
query (see ``qdrant_payload.to_filter``), so that a search's top k are k readable chunks.
``None`` in place of a ReadAccess means no restriction: an admin, a server without
authentication (every caller trusted), or the service's own offline commands.

Pure data and functions: every layer may import this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FIELD = "access"  # the chunk payload field, keyword-indexed
GROUP = "g:"
PRINCIPAL = "p:"
EVERYONE = "*"  # the group every authenticated caller is in
ADMIN_ONLY = "admin:"  # a label no caller holds: only an unrestricted reader sees it
MAX_NAME = 128
MAX_LABELS = 100


class LabelError(ValueError):
    """A group or principal name that cannot be a label (the message says why)."""


def check_name(name: object, what: str) -> str:
    """``name`` stripped, when it can be a label: text of 1 to 128 printable characters."""
    if not isinstance(name, str):
        raise LabelError(f"{what} must be a string, not {type(name).__name__}")
    stripped = name.strip()
    if not stripped:
        raise LabelError(f"{what} must not be empty")
    if len(stripped) > MAX_NAME:
        raise LabelError(f"{what} {stripped[:32]!r}… is longer than {MAX_NAME} characters")
    if not stripped.isprintable():
        raise LabelError(f"{what} {stripped[:32]!r} contains control characters")
    return stripped


def labels(groups: Iterable[str] = (), principals: Iterable[str] = ()) -> tuple[str, ...]:
    """The labels of a document readable by ``groups`` and ``principals`` (sorted, unique);
    raises :class:`LabelError` for a name that cannot be one."""
    found = {GROUP + check_name(g, "a group") for g in groups}
    found |= {PRINCIPAL + check_name(p, "a principal") for p in principals}
    if len(found) > MAX_LABELS:
        raise LabelError(f"a document may name at most {MAX_LABELS} groups and principals")
    return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class ReadAccess:
    """What one caller may read: documents with one of ``grants`` among their labels, and
    unlabelled documents when ``unlabelled`` is true."""

    grants: frozenset[str]
    unlabelled: bool = False

    @classmethod
    def of(cls, principal: str, groups: Iterable[str], *, unlabelled: bool = False) -> ReadAccess:
        """A caller named ``principal`` in ``groups`` (names that cannot be labels grant
        nothing, so a caller cannot widen its reach with an odd group name)."""
        grants = {GROUP + EVERYONE}
        for group in groups:
            if _label_name(group):
                grants.add(GROUP + group.strip())
        if _label_name(principal):
            grants.add(PRINCIPAL + principal.strip())
        return cls(frozenset(grants), unlabelled)

    def permits(self, document_labels: Iterable[str]) -> bool:
        """Whether a document with these labels is readable (the engine filter's rule, for
        the per-document records that are read whole, not searched)."""
        held = tuple(document_labels)
        if not held:
            return self.unlabelled
        return any(label in self.grants for label in held)


def _label_name(name: object) -> bool:
    try:
        check_name(name, "name")
    except LabelError:
        return False
    return True
