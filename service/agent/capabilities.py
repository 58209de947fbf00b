"""What a model endpoint can do, learned once per process, and how its tokens are counted.

Servers differ where the agent depends on them: llama-cpp-python renders tools only when
``tool_choice`` is sent and cannot stream a tool call (HTTP 200, then an empty body);
vLLM reports its window as ``max_model_len`` in ``/v1/models``, llama.cpp's own server in
``/props``; OpenAI says neither and counts with tiktoken. The settings can state each of
these; what they leave open is learned here or by the first run that needs it, and kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from service.observability.logging import get_logger

log = get_logger("ragagent.agent")

ToolCalling = Literal["streamed", "non_streamed", "none"]

# A window no endpoint told: small on purpose. Trimming more than needed costs some context;
# overflowing costs the answer (llama.cpp sends an empty body), and local servers often run
# with 2,048-4,096 tokens.
DEFAULT_CONTEXT_TOKENS = 4096
_PROBE_TIMEOUT_S = 5.0
# Windows of OpenAI's models, longest prefix first; they are not published by the API.
_OPENAI_WINDOWS = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-4", 8_192),
)
# Estimate without the model's tokenizer: English prose runs at 4-4.5 characters per token
# in the tokenizers of Llama, Qwen, SmolLM and GPT; code, URLs and other languages run
# shorter. One token per 3 characters overestimates, which is the safe side for a budget.
CHARS_PER_TOKEN = 3.0
# Chat templates wrap each message in role markers: about this many tokens each.
MESSAGE_OVERHEAD_TOKENS = 6


@dataclass(slots=True)
class Capabilities:
    """What is known of the endpoint; None: not known yet."""

    tool_calling: ToolCalling | None = None
    context_tokens: int | None = None


def is_openai_model(model: str, base_url: str | None) -> bool:
    return base_url is None or "api.openai.com" in base_url


def known_window(model: str) -> int | None:
    name = model.lower()
    for prefix, window in _OPENAI_WINDOWS:
        if name.startswith(prefix):
            return window
    return None


def token_counter(model: str, base_url: str | None) -> tuple[Callable[[str], int], bool]:
    """A function counting the tokens of a text, and whether it is the model's tokenizer.

    tiktoken for OpenAI's own models (its vocabulary files come from OpenAI on first use,
    which a server talking to OpenAI can reach); the documented estimate otherwise, or when
    tiktoken cannot load its vocabulary.
    """
    if is_openai_model(model, base_url):
        try:
            import tiktoken

            try:
                encoding = tiktoken.encoding_for_model(model)
            except KeyError:
                encoding = tiktoken.get_encoding("o200k_base")
            return (lambda text: len(encoding.encode(text, disallowed_special=()))), True
        except Exception as exc:  # noqa: BLE001 (any failure leaves the estimate)
            log.warning("tiktoken unavailable; counting tokens by estimate", error=str(exc))
    return estimate_tokens, False


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def count_messages(count: Callable[[str], int], messages: Iterable[dict[str, Any]]) -> int:
    """Tokens of a list of chat messages, tool calls included, with the template overhead."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD_TOKENS + count(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            total += count(str(function.get("name", ""))) + count(
                str(function.get("arguments", ""))
            )
    return total


async def probe_context_tokens(
    base_url: str | None,
    model: str,
    api_key: str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int | None:
    """The window the endpoint reports for ``model``: vLLM's ``/v1/models`` max_model_len
    (and the context_length some other servers put there), else llama.cpp's ``/props``."""
    if base_url is None:
        return None
    root = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(
        timeout=_PROBE_TIMEOUT_S, headers=headers, transport=transport
    ) as client:
        window = await _from_models(client, f"{root}/models", model)
        if window is None:
            server_root = root.removesuffix("/v1")
            window = await _from_props(client, f"{server_root}/props")
    return window


async def _from_models(client: httpx.AsyncClient, url: str, model: str) -> int | None:
    body = await _get_json(client, url)
    entries = body.get("data") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if entry.get("id") not in (model, None) and len(entries) > 1:
            continue
        for key in ("max_model_len", "context_length", "context_window", "n_ctx"):
            value = entry.get(key) or (entry.get("meta") or {}).get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


async def _from_props(client: httpx.AsyncClient, url: str) -> int | None:
    body = await _get_json(client, url)
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings") or {}
    value = settings.get("n_ctx") if isinstance(settings, dict) else None
    value = value or body.get("n_ctx")
    return value if isinstance(value, int) and value > 0 else None


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    try:
        response = await client.get(url)
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None  # a server that does not tell: the setting or the default applies
