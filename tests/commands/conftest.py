"""The whole textbook, ingested once per test session for the evaluation tests."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import pytest

from service.commands.ingest import IngestOutcome, ingest_local
from service.config import Settings
from service.ingest.loader import load_documents
from tests.conftest import SHARED_CORPUS
from tests.corpus.support import open_test_runtime, settings_for
from tests.helpers import local_embedder

BOOK_URL = "https://physical-ai-robotics.dev"


@dataclass(frozen=True)
class IndexedBook:
    settings: Settings
    first: IngestOutcome  # into an empty store
    second: IngestOutcome  # the same files again


@pytest.fixture(scope="session")
def indexed_book(tmp_path_factory: pytest.TempPathFactory) -> IndexedBook:
    """Ingests the book twice into a session folder: embedding it takes about a minute."""
    docs = SHARED_CORPUS / "docs"
    if not docs.is_dir():
        pytest.skip(f"shared corpus not found at {SHARED_CORPUS} (../shared is absent)")
    local_embedder()  # skips where the model is not provisioned
    # Session fixtures run before the per-test environment clean-up: do it here too.
    with pytest.MonkeyPatch.context() as env:
        for var in [v for v in os.environ if v.startswith("RAGAGENT_")]:
            env.delenv(var)
        settings = settings_for(tmp_path_factory.mktemp("book"))

    def ingest() -> IngestOutcome:
        # A loop of its own: the tests' loops are per test, this store outlives them.
        return asyncio.run(
            ingest_local(
                load_documents(docs), settings, base_url=BOOK_URL, open_runtime=open_test_runtime
            )
        )

    return IndexedBook(settings, ingest(), ingest())
