"""Settings of the search pipeline's steps: page diversity and a reranker endpoint."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class SearchStepSettings(BaseModel):
    """How many chunks of one page a search returns, and the HTTP reranker (RERANKER=http)."""

    # 2: on the project's seven question sets (227 answerable) recall@5 0.969 -> 0.978 and
    # MRR 0.900 -> 0.905 over no limit; 1 gave 0.982 / 0.903 (docs/retrieval.md).
    retrieval_per_document: int = Field(
        2,
        ge=0,
        le=100,
        description="Most chunks of one document (page) in a search's results, so that the "
        "top results cover more pages; 0 = no limit.",
    )
    reranker_url: str | None = Field(
        None,
        description="URL of a /rerank endpoint (Hugging Face TEI, vLLM, llama.cpp server, "
        "Jina, Cohere: POST {query, documents, top_n} -> results [{index, relevance_score}]), "
        "used when RERANKER=http, e.g. http://127.0.0.1:8080/rerank.",
    )
    reranker_api_key: SecretStr | None = Field(
        None, description="Bearer token sent to RERANKER_URL (none when unset)."
    )
    reranker_model: str | None = Field(
        None,
        description="Model name sent with each rerank request (vLLM, Jina and Cohere want "
        "one; TEI and llama.cpp serve a single model and ignore it).",
    )
    reranker_timeout: float = Field(
        2.0,
        gt=0,
        le=60,
        description="Upper bound in seconds on one rerank request (the call's deadline "
        "bounds it too); past it, or on any failure, the lexical reranker orders the "
        "candidates and a WARNING is logged (metric ragagent_reranker_fallbacks_total).",
    )
    reranker_threshold_scores: bool = Field(
        False,
        description="RERANKER=http only: the endpoint's relevance scores (0-1, as TEI, Jina "
        "and Cohere return them) replace the retrieval scores, and the confidence threshold "
        "applies to them; off, they only reorder and the threshold applies to the cosine.",
    )
