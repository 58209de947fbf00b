"""The context window as endpoints tell it, and the token estimate."""

from __future__ import annotations

import httpx

from service.agent.capabilities import (
    estimate_tokens,
    known_window,
    probe_context_tokens,
    token_counter,
)


def _server(routes: dict[str, object]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(404) if body is None else httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


async def test_vllm_reports_max_model_len_in_models() -> None:
    vllm = _server({"/v1/models": {"data": [{"id": "qwen", "max_model_len": 32768}]}})
    assert await probe_context_tokens("http://h/v1", "qwen", "k", transport=vllm) == 32768


async def test_llama_server_reports_n_ctx_in_props() -> None:
    llama = _server(
        {
            "/v1/models": {"data": [{"id": "m", "owned_by": "llamacpp"}]},
            "/props": {"default_generation_settings": {"n_ctx": 4096}},
        }
    )
    assert await probe_context_tokens("http://h/v1", "m", "k", transport=llama) == 4096


async def test_a_server_that_does_not_tell_leaves_it_to_the_setting() -> None:
    silent = _server({"/v1/models": {"data": [{"id": "m", "owned_by": "me"}]}})
    assert await probe_context_tokens("http://h/v1", "m", "k", transport=silent) is None


def test_openai_windows_and_the_estimate() -> None:
    assert known_window("gpt-4o-mini") == 128_000
    assert known_window("smollm2") is None
    assert estimate_tokens("a" * 30) == 10
    count, exact = token_counter("smollm2", "http://127.0.0.1:8080/v1")
    assert (count("abcdef"), exact) == (2, False), "local models: the documented estimate"
