"""Settings of the vector store and the embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from service.config.paths import default_model_dir


class StoreSettings(BaseModel):
    """The embedded store or a Qdrant server, and how searches score."""

    qdrant_url: str | None = Field(
        None,
        description="URL of a Qdrant server or cluster; unset = embedded store under DATA_DIR.",
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key for QDRANT_URL.")
    qdrant_collection: str = Field(
        "ragagent", min_length=1, max_length=255, description="Qdrant collection name."
    )
    qdrant_timeout: float = Field(
        10.0, gt=0, description="Upper bound in seconds on one Qdrant request."
    )
    confidence_threshold: float = Field(
        0.35,
        ge=0,
        le=1,
        description="Default minimum relevance score (0-1) for a source to be used.",
    )
    # 0.9: measured on the four read question sets (service.retrieval.piece_vectors.PieceMatch);
    # 1 lets a short piece that repeats the question's words outrank whole chunks.
    piece_weight: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Dense searches also score a chunk by its best sentence, list item or "
        "table row (vectors stored at ingest): score = max(cosine, weight x best piece "
        "cosine), over 20 candidates; 0 disables it. Hybrid searches keep the cosine.",
    )
    retrieval_mode: Literal["dense", "hybrid"] = Field(
        "dense",
        description="dense: embedding similarity alone. hybrid: embedding and BM25 term "
        "matches fused by rank (RRF); scores stay the embedding's cosine.",
    )
    # lexical since 2026-11-23: over piece-scored candidates it raised MRR on the four read
    # question sets from 0.894 to 0.918 (recall@5 0.964 -> 0.971), weights 0.1-0.3 alike.
    reranker: Literal["none", "lexical", "http"] = Field(
        "lexical",
        description="Reorders 3x the requested results after retrieval; lexical: a bonus for "
        "the query's rarer terms found in a chunk (scores and the threshold unchanged); "
        "http: a cross-encoder behind RERANKER_URL, falling back to lexical when it fails.",
    )


class EmbeddingSettings(BaseModel):
    """The embedding model: local (provisioned) or an OpenAI-compatible endpoint."""

    embedding_provider: Literal["fastembed", "openai"] = Field(
        "fastembed", description="fastembed (local ONNX) or openai (any /v1/embeddings)."
    )
    embedding_model: str = Field(
        "sentence-transformers/all-MiniLM-L6-v2",
        min_length=1,
        description="Embedding model name (a fastembed model, or the model of the "
        "OpenAI-compatible endpoint).",
    )
    embedding_model_dir: Path | None = Field(
        default_factory=default_model_dir,
        description="Local ONNX model folder for fastembed (model.onnx, tokenizer.json, "
        "config.json); when it does not exist, fastembed resolves EMBEDDING_MODEL itself.",
    )
    embedding_max_tokens: int = Field(
        256, ge=16, le=8192, description="Token limit of one embedded text (longer is cut)."
    )
    embedding_batch_size: int = Field(
        64,
        ge=1,
        le=1024,
        description="Most texts per model call (local embedder) or per request (OpenAI-"
        "compatible endpoint).",
    )
    embedding_batch_tokens: int = Field(
        256,
        ge=1,
        le=65536,
        description="Most padded tokens per model call of the local embedder: short texts "
        "(the extractive strategy's sentences) share a call, chunks go one or two at a time, "
        "which on CPU was measured fastest for them.",
    )
    embedding_threads: int | None = Field(
        1,
        ge=1,
        description="ONNX runtime threads per fastembed inference; unset = all cores. One "
        "by default: concurrent requests already run on the blocking threads, and a query "
        "took 3.9 ms on one thread against 7.8 ms on all of 2 busy cores.",
    )
    embedding_base_url: str | None = Field(
        None, description="Base URL of the OpenAI-compatible embeddings endpoint."
    )
    embedding_api_key: SecretStr | None = Field(
        None, description="API key for EMBEDDING_BASE_URL (falls back to LLM_API_KEY)."
    )
    embedding_dimensions: int | None = Field(
        None, ge=1, description="Vector size of the OpenAI embedding model (asked if unset)."
    )
