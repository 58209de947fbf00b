"""Who may read a document being ingested: its front matter's ``access`` key, together with
the grants the whole ingest carries (IngestOptions.access, ``ragagent ingest --group``).

The labels are not part of the document's hash: a change of permissions alone relabels the
stored chunks (``DocumentWrites.set_document_access``) instead of embedding them again.
"""

from __future__ import annotations

from service.access import ADMIN_ONLY
from service.errors import FieldViolation, InvalidArgument
from service.ingest.frontmatter import FrontMatterError, split_front_matter
from service.ingest.loader import SourceDocument


def document_labels(
    document: SourceDocument, granted: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(labels, warnings) of ``document``: the union of ``granted`` and its front matter's.

    Front matter that cannot be read at all may have held an ``access`` key: the document
    is then readable by admins only, never by more than intended (the parser's warning
    about the front matter is reported already; ListDocuments shows it ``admin_only``).
    An ``access`` key that is there but unusable refuses the document (INVALID_ARGUMENT).
    """
    try:
        front, _ = split_front_matter(document.content, document.path)
    except FrontMatterError:
        return (ADMIN_ONLY,), ()
    if front.access_error:
        raise InvalidArgument(
            [
                FieldViolation(
                    "document.content",
                    f"{document.path}: {front.access_error}",
                    "document.access_invalid",
                )
            ]
        )
    return tuple(sorted({*granted, *(front.access or ())})), ()
