"""The runtime: every long-lived dependency of the server, built from Settings once.

The composition root's first half. ``Runtime.open`` builds, in this order, the blocking
executor (first, so closed last), the embedder, the chunk store (embedded qdrant-edge or a
Qdrant server), the chat model client, the agent, the session store and its purger, and
closes them in reverse order. ``service.server`` serves a ``Runtime`` over grpc.aio; the
CLI's one-shot commands (ingest, eval, migrate) use it without a server.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from service.agent import Agent, OpenAIChatModel, build_openai_client
from service.agent.prompts import read_opening
from service.config import Settings
from service.errors import ConfigurationError
from service.executor import INLINE, Blocking, BlockingExecutor
from service.observability.logging import get_logger
from service.retrieval.base import ChunkStore, Embedder, Retriever
from service.retrieval.edge_migrate import migrate_local, old_store_holds
from service.retrieval.edge_store import EdgeStore
from service.retrieval.embedders import FastEmbedEmbedder, OpenAIEmbedder
from service.retrieval.lexical import TermCheck
from service.retrieval.qdrant_store import QdrantStore, open_qdrant_client
from service.retrieval.rerank import LexicalReranker, RerankingRetriever
from service.sessions import SessionPurger, SessionStore, open_session_store
from service.wiring.observability import Observability

log = get_logger("ragagent.runtime")


def build_local_embedder(settings: Settings, executor: Blocking = INLINE) -> Embedder:
    """The fastembed embedder over the local model folder, inferring on ``executor``
    (blocking: loads the model)."""
    model_dir = settings.embedding_model_dir
    if model_dir is None or not model_dir.is_dir():
        raise ConfigurationError(
            f"RAGAGENT_EMBEDDING_MODEL_DIR={model_dir} does not exist: run `make setup` to "
            "provision the default model, or point it at a local ONNX model folder"
        )
    return FastEmbedEmbedder(
        model_dir,
        model_name=settings.embedding_model,
        max_tokens=settings.embedding_max_tokens,
        threads=settings.embedding_threads,
        batch_size=settings.embedding_batch_size,
        batch_tokens=settings.embedding_batch_tokens,
        executor=executor,
    )


async def build_embedder(
    settings: Settings, stack: AsyncExitStack, executor: Blocking = INLINE
) -> Embedder:
    """The embedder the settings name; its resources are released by ``stack``, its
    blocking work (loading and running a local model) runs on ``executor``."""
    if settings.embedding_provider == "fastembed":
        return await executor.run(build_local_embedder, settings, executor)
    import openai

    key = settings.embedding_api_key or settings.llm_api_key
    base_url = settings.embedding_base_url or settings.llm_base_url
    client = openai.AsyncOpenAI(
        api_key=key.get_secret_value() if key else "not-needed",
        base_url=base_url,
        max_retries=settings.llm_max_retries,
    )
    stack.push_async_callback(client.close)
    common: dict[str, Any] = {
        "model_name": settings.embedding_model,
        "max_tokens": settings.embedding_max_tokens,
        "batch_size": settings.embedding_batch_size,
    }
    if settings.embedding_dimensions:
        return OpenAIEmbedder(client, dimension=settings.embedding_dimensions, **common)
    return await OpenAIEmbedder.probe(client, **common)


async def open_store(
    settings: Settings, embedder: Embedder, executor: Blocking, stack: AsyncExitStack
) -> ChunkStore:
    """The store the settings name, its collection made or checked; closed by ``stack``.

    Embedded (no RAGAGENT_QDRANT_URL): qdrant-edge under RAGAGENT_DATA_DIR, after migrating
    a folder of the old local-mode format if one holds the collection. Otherwise a server.
    """
    term_check = (
        TermCheck(embedder.count_tokens, penalty=settings.unknown_term_penalty)
        if settings.unknown_term_penalty < 1
        else None
    )
    if settings.qdrant_url is None:
        edge = await EdgeStore.open(
            settings.edge_path,
            embedder,
            collection=settings.qdrant_collection,
            executor=executor,
            call_timeout=settings.qdrant_timeout,
            term_check=term_check,
            hybrid=settings.retrieval_mode == "hybrid",
            piece_weight=settings.piece_weight,
        )
        stack.push_async_callback(edge.close)
        if old_store_holds(settings.qdrant_path, settings.qdrant_collection):
            await migrate_local(settings.qdrant_path, edge, executor=executor)
        return edge
    api_key = settings.qdrant_api_key
    client = open_qdrant_client(
        url=settings.qdrant_url,
        api_key=api_key.get_secret_value() if api_key else None,
        path=settings.qdrant_path,
        timeout=settings.qdrant_timeout,
    )
    store = QdrantStore(
        client,
        embedder,
        collection=settings.qdrant_collection,
        timeout=settings.qdrant_timeout,
        term_check=term_check,
        hybrid=settings.retrieval_mode == "hybrid",
        piece_weight=settings.piece_weight,
    )
    stack.push_async_callback(store.close)
    await store.ensure_collection()
    return store


def searcher(settings: Settings, store: ChunkStore) -> Retriever:
    """The store's search, reranked when the settings ask for it."""
    if settings.reranker == "lexical":
        return RerankingRetriever(store, LexicalReranker())
    return store


class Runtime:
    """Every long-lived dependency of the server, built once and closed once."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        store: ChunkStore,
        *,
        agent: Agent | None = None,
        sessions: SessionStore | None = None,
        stack: AsyncExitStack | None = None,
        executor: BlockingExecutor | None = None,
        observability: Observability | None = None,
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.store = store
        self.agent = agent
        self.sessions = sessions
        self._stack = stack
        # A runtime assembled by hand (tests) gets an executor of its own and closes it.
        self._owns_executor = executor is None
        self.executor = executor or BlockingExecutor(settings.blocking_threads)
        self.observability = observability or Observability.from_settings(settings)

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        observability: Observability | None = None,
    ) -> Runtime:
        # Metrics and tracing wrap the embedder, retriever and model built here.
        observe = observability or Observability.from_settings(settings)
        async with AsyncExitStack() as stack:
            # Made first, so closed last: everything after it may block on it until closed.
            executor = BlockingExecutor(settings.blocking_threads)
            stack.push_async_callback(executor.shutdown)
            opening = None  # read first: a bad prompt file fails before any model loads
            if settings.system_prompt_file is not None:
                opening = await executor.run(read_opening, settings.system_prompt_file)
            if embedder is None:
                embedder = await build_embedder(settings, stack, executor)
            elif isinstance(embedder, FastEmbedEmbedder):
                # A model loaded once for many runtimes (tests) infers on this one's executor.
                embedder = embedder.using(executor)
            embedder = observe.embedder(embedder)
            store = await open_store(settings, embedder, executor, stack)
            model = None
            if settings.effective_strategy != "extractive":
                llm = build_openai_client(settings, http_client=observe.model_http_client())
                stack.push_async_callback(llm.close)
                model = observe.model(OpenAIChatModel.from_settings(llm, settings))
            agent = Agent(
                settings,
                retriever=observe.retriever(searcher(settings, store)),
                model=model,
                embedder=embedder,
                system_prompt=opening,
            )
            sessions = await open_session_store(settings)
            stack.push_async_callback(sessions.close)
            purger = SessionPurger(sessions, interval_s=settings.session_purge_interval)
            await purger.start()
            stack.push_async_callback(purger.stop)
            log.info(
                "runtime ready",
                strategy=agent.strategy,
                embedding_model=embedder.model_name,
                store="server" if settings.qdrant_url else "embedded",
                sessions="postgresql" if settings.database_url else "sqlite",
            )
            return cls(
                settings,
                embedder,
                store,
                agent=agent,
                sessions=sessions,
                stack=stack.pop_all(),
                executor=executor,
                observability=observe,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
        else:
            await self.store.close()
        if self._owns_executor:
            await self.executor.shutdown()
