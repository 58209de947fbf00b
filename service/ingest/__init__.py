"""Ingestion: Markdown/MDX pages parsed, chunked, embedded and written to the store."""

from service.ingest.chunker import Chunker, TextChunk
from service.ingest.frontmatter import FrontMatterError, MarkdownError
from service.ingest.loader import SourceDecodeError, SourceDocument, load_documents
from service.ingest.markdown import ParsedDocument, parse_markdown
from service.ingest.outcome import (
    DocumentStatus,
    IngestEvent,
    IngestSummary,
    PreparedDocument,
    chunk_id,
)
from service.ingest.pipeline import Ingestor
from service.ingest.urls import page_url, placement

__all__ = [
    "Chunker",
    "DocumentStatus",
    "FrontMatterError",
    "IngestEvent",
    "IngestSummary",
    "Ingestor",
    "MarkdownError",
    "ParsedDocument",
    "PreparedDocument",
    "SourceDecodeError",
    "SourceDocument",
    "TextChunk",
    "chunk_id",
    "load_documents",
    "page_url",
    "parse_markdown",
    "placement",
]
