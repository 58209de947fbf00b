"""The runtime: every long-lived dependency of the server, built from Settings once.

The composition root's first half. ``Runtime.open`` builds, in this order, the blocking
executor (first, so closed last), the embedder, the chunk store (embedded qdrant-edge or a
Qdrant server), the chat model client, the agent, the session store and its purger, and
closes them in reverse order. ``service.server`` serves a ``Runtime`` over grpc.aio; the
CLI's one-shot commands (ingest, eval) use it without a server.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx

from service.agent import Agent, OpenAIChatModel, build_openai_client
from service.agent.prompts import read_opening
from service.config import Settings
from service.configs import agent_config, model_client_config, session_store_config
from service.errors import ConfigurationError
from service.executor import INLINE, Blocking, BlockingExecutor
from service.fleet.lease import corpus_lease
from service.ingest import Ingestor
from service.observability.logging import get_logger
from service.retrieval.base import ChunkStore, Embedder, Retriever
from service.retrieval.edge_store import EdgeStore
from service.retrieval.embedders import FastEmbedEmbedder, OpenAIEmbedder
from service.retrieval.http_rerank import HttpReranker
from service.retrieval.pipeline import SearchPipeline, SearchSteps
from service.retrieval.rerank import LexicalReranker, Reranker
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

    Embedded (no RAGAGENT_QDRANT_URL): qdrant-edge under RAGAGENT_DATA_DIR. Otherwise a server.
    """
    if settings.qdrant_url is None:
        edge = await EdgeStore.open(
            settings.edge_path,
            embedder,
            collection=settings.qdrant_collection,
            executor=executor,
            call_timeout=settings.qdrant_timeout,
        )
        stack.push_async_callback(edge.close)
        return edge
    # Imported here: qdrant_client is 1.8 s of a process start the embedded store never needs.
    from service.retrieval.qdrant_store import QdrantStore, open_qdrant_client, read_consistency

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
        hybrid=settings.retrieval_mode == "hybrid",
        cluster=settings.qdrant_cluster,
        read_consistency=read_consistency(settings.qdrant_read_consistency),
    )
    stack.push_async_callback(store.close)
    await store.ensure_collection()
    return store


def search_steps(settings: Settings) -> SearchSteps:
    """Which steps a search runs, from the settings."""
    return SearchSteps(
        hybrid=settings.retrieval_mode == "hybrid",
        piece_weight=settings.piece_weight,
        per_document=settings.retrieval_per_document,
        threshold_on_rerank=settings.reranker == "http" and settings.reranker_threshold_scores,
    )


def build_reranker(
    settings: Settings,
    stack: AsyncExitStack | None,
    on_fallback: Callable[[str], None] = lambda reason: None,
) -> Reranker | None:
    """The reranker the settings name (None: none); an HTTP one's client closes with ``stack``."""
    if settings.reranker == "none":
        return None
    lexical = LexicalReranker()
    if settings.reranker == "lexical":
        return lexical
    if not settings.reranker_url:
        raise ConfigurationError("RAGAGENT_RERANKER=http needs RAGAGENT_RERANKER_URL")
    if not settings.reranker_url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"RAGAGENT_RERANKER_URL={settings.reranker_url!r} is not an http(s) URL"
        )
    if stack is None:
        raise ConfigurationError("RAGAGENT_RERANKER=http needs a runtime opened by Runtime.open")
    client = httpx.AsyncClient(timeout=settings.reranker_timeout)
    stack.push_async_callback(client.aclose)
    key = settings.reranker_api_key
    return HttpReranker(
        client,
        url=settings.reranker_url,
        fallback=lexical,
        timeout=settings.reranker_timeout,
        model=settings.reranker_model,
        api_key=key.get_secret_value() if key else None,
        replace_scores=settings.reranker_threshold_scores,
        on_fallback=on_fallback,
    )


def build_retriever(
    settings: Settings, store: ChunkStore, reranker: Reranker | None
) -> SearchPipeline:
    """The one search every caller uses: the store's engine with the settings' steps."""
    return SearchPipeline(store, store.embedder, search_steps(settings), reranker=reranker)


def build_ingestor(
    settings: Settings,
    embedder: Embedder,
    store: ChunkStore,
    observe: Observability,
    executor: Blocking,
) -> Ingestor:
    """The one ingest pipeline every writer uses (the server, `ragagent ingest`, the demo):
    its writes counted, its parsing on ``executor`` under the per-document CPU limit, and one
    document written at a time per collection across replicas (service.fleet)."""
    return Ingestor(
        embedder,
        observe.chunk_store(store),
        executor=executor,
        lease=corpus_lease(store, ttl=settings.corpus_lease_ttl, wait=settings.corpus_lease_wait),
        document_cpu_seconds=settings.ingest_document_cpu_seconds,
    )


class Runtime:
    """Every long-lived dependency of the server, built once and closed once."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        store: ChunkStore,
        *,
        agent: Agent | None = None,
        retriever: Retriever | None = None,
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
        # The search every caller uses, built once (the server and the agent share it); a
        # runtime assembled by hand gets the settings' steps, observed.
        self.retriever = retriever or self.observability.retriever(
            build_retriever(settings, store, build_reranker(settings, None))
        )
        self.ingestor = build_ingestor(settings, embedder, store, self.observability, self.executor)

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
            fallbacks = observe.metrics.reranker_fallbacks
            reranker = build_reranker(settings, stack, lambda r: fallbacks.labels(r).inc())
            pipeline = build_retriever(settings, store, reranker)
            retriever = observe.retriever(pipeline)
            model = None
            if settings.effective_strategy != "extractive":
                client_config = model_client_config(settings)
                llm = build_openai_client(client_config, http_client=observe.model_http_client())
                stack.push_async_callback(llm.close)
                model = observe.model(OpenAIChatModel.from_config(llm, client_config))
            agent = Agent(
                agent_config(settings),
                retriever=retriever,
                model=model,
                embedder=embedder,
                system_prompt=opening,
                consistent_limit=pipeline.consistent_limit,
            )
            sessions = await open_session_store(session_store_config(settings))
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
                retriever=retriever,
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
