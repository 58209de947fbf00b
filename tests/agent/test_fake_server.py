"""The scripted OpenAI server behaves like a real one, as seen by the real openai client."""

from __future__ import annotations

import itertools
import json
import math
import time

import openai
import pytest

from tests.fakes.openai_server import ChatReply, ErrorReply, FakeOpenAI, ToolCallScript

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "hello"}
]


async def _stream(client: openai.AsyncOpenAI, **extra: object) -> list[object]:
    stream = await client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        stream=True,
        **extra,  # type: ignore[call-overload]
    )
    return [chunk async for chunk in stream]


async def test_streams_text_in_the_scripted_deltas_with_usage_last(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["Hel", "lo ", "[1]."], prompt_tokens=5))

    chunks = await _stream(openai_client, stream_options={"include_usage": True})

    texts = [c.choices[0].delta.content for c in chunks if c.choices]  # type: ignore[attr-defined]
    assert "".join(t for t in texts if t) == "Hello [1]."
    assert [t for t in texts if t] == ["Hel", "lo ", "[1]."]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]  # type: ignore[attr-defined]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == 5  # type: ignore[attr-defined]
    assert chunks[-1].choices == []  # type: ignore[attr-defined]


async def test_usage_is_only_sent_when_asked(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply.text("hi"))
    chunks = await _stream(openai_client)
    assert all(c.usage is None for c in chunks)  # type: ignore[attr-defined]


async def test_records_path_headers_and_body(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply.text("hi"))
    await _stream(openai_client, temperature=0.3)

    [request] = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["temperature"] == 0.3
    assert request.messages == [{"role": "user", "content": "hello"}]
    assert request.completed
    assert not request.client_closed


async def test_streams_tool_calls_in_fragments_as_real_servers_do(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    arguments = json.dumps({"query": "what is a URDF link", "top_k": 3})
    fake_openai.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", arguments, id="call_a"),
            ToolCallScript("qdrant_retrieval", '{"query": "joints"}', id="call_b"),
        )
    )

    chunks = await _stream(openai_client)

    fragments = [
        tc
        for c in chunks
        if c.choices  # type: ignore[attr-defined]
        for tc in c.choices[0].delta.tool_calls or []  # type: ignore[attr-defined]
    ]
    first_a, *rest_a = [f for f in fragments if f.index == 0]
    assert (first_a.id, first_a.function.name, first_a.function.arguments) == (
        "call_a",
        "qdrant_retrieval",
        "",
    )
    assert len(rest_a) > 2, "arguments arrive split over several chunks"
    assert all(f.id is None and f.function.name is None for f in rest_a)
    assert "".join(f.function.arguments for f in rest_a) == arguments
    assert "".join(f.function.arguments or "" for f in fragments if f.index == 1) == (
        '{"query": "joints"}'
    )
    assert chunks[-1].choices[0].finish_reason == "tool_calls"  # type: ignore[attr-defined]


async def test_answers_without_streaming(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(
        ChatReply.text("An answer."),
        ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "x"}', id="call_1")),
    )

    text = await openai_client.chat.completions.create(model="m", messages=MESSAGES)
    calls = await openai_client.chat.completions.create(model="m", messages=MESSAGES)

    assert text.choices[0].message.content == "An answer."
    assert text.usage is not None
    assert text.usage.total_tokens == 18
    [call] = calls.choices[0].message.tool_calls or []
    assert (call.id, call.function.name) == ("call_1", "qdrant_retrieval")  # type: ignore[union-attr]
    assert calls.choices[0].finish_reason == "tool_calls"


async def test_rate_limit_carries_retry_after(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ErrorReply(429, "slow down", retry_after=7))

    with pytest.raises(openai.RateLimitError) as caught:
        await _stream(openai_client)

    assert caught.value.response.headers["retry-after"] == "7"
    assert "slow down" in caught.value.message


async def test_server_errors_are_retried_by_the_client_then_surface(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script_chat(*[ErrorReply(500, retry_after=0.01)] * 3)
    client = openai.AsyncOpenAI(api_key="k", base_url=fake_openai.base_url, max_retries=2)

    with pytest.raises(openai.InternalServerError):
        await _stream(client)

    assert len(fake_openai.chat_requests) == 3
    await client.close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, openai.AuthenticationError), (403, openai.PermissionDeniedError)],
)
async def test_auth_failures(
    fake_openai: FakeOpenAI,
    openai_client: openai.AsyncOpenAI,
    status: int,
    error: type[openai.APIStatusError],
) -> None:
    fake_openai.script_chat(ErrorReply(status, "bad key"))
    with pytest.raises(error):
        await _stream(openai_client)


async def test_delays_the_first_byte(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply.text("late", delay=0.3))
    started = time.monotonic()
    await _stream(openai_client)
    assert time.monotonic() - started >= 0.3


async def test_stalls_mid_stream(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["a", "b", "c"], stall_after=2, stall_for=0.4))
    stream = await openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    arrivals = []
    async for _ in stream:
        arrivals.append(time.monotonic())
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert max(gaps) >= 0.3  # a little less than the stall: the previous read may be late
    assert gaps.index(max(gaps)) == 1, "the pause comes after the second event"


async def test_malformed_chunk_breaks_the_clients_parser(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["a", "b"], malformed_after=2))
    with pytest.raises(json.JSONDecodeError):
        await _stream(openai_client)


async def test_dropped_connection_is_a_connection_error(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["a", "b", "c"], drop_after=2))
    with pytest.raises(openai.APIConnectionError):
        await _stream(openai_client)
    assert not fake_openai.requests[0].completed


async def test_notices_when_the_client_closes_the_stream(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_chat(ChatReply(deltas=["x"] * 50, delta_interval=0.02))
    stream = await openai_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    async for _ in stream:
        break
    await stream.close()

    request = await fake_openai.wait_client_closed()
    assert request.client_closed
    assert not request.completed


async def test_unscripted_requests_fail_loudly(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError, match="no scripted chat reply"):
        await _stream(openai_client)


@pytest.mark.parametrize("encoding", ["float", None])
async def test_embeddings_are_deterministic_and_normalised(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI, encoding: str | None
) -> None:
    fake_openai.embedding_dimension = 32
    texts = ["robot arm joints", "robot arm joints", "a recipe for bread"]

    # Without an encoding the client asks for base64 and decodes it itself.
    extra = {"encoding_format": encoding} if encoding else {}
    response = await openai_client.embeddings.create(model="e", input=texts, **extra)  # type: ignore[arg-type]
    if encoding is None:
        assert fake_openai.embedding_requests[0].body["encoding_format"] == "base64"

    vectors = [item.embedding for item in response.data]
    assert all(len(v) == 32 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)
    assert vectors[0] == pytest.approx(vectors[1])
    assert vectors[0] != pytest.approx(vectors[2])


async def test_embeddings_faults(
    fake_openai: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_openai.script_embeddings(ErrorReply(503))
    with pytest.raises(openai.InternalServerError):
        await openai_client.embeddings.create(model="e", input="x")
    ok = await openai_client.embeddings.create(model="e", input="x")
    assert len(ok.data) == 1
