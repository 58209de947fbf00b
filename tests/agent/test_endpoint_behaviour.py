"""What real model servers do over HTTP, replayed by the scripted fake: slow first tokens,
stalls, 500s that are about the request, context overflows, streamed tool calls that come
back empty (llama-cpp-python), a server too busy to accept a connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress

import openai
import pytest

from service.agent.model import OpenAIChatModel, TurnEnd
from service.agent.model_errors import endpoint_error
from service.domain import Deadline
from service.errors import (
    ModelContextExceeded,
    ModelRequestRejected,
    ModelStalled,
    ModelUnavailable,
    RagAgentError,
)
from service.retrieval.embedders import EmbedderUnavailable
from tests.agent.conftest import AgentFactory
from tests.agent.support import FakeRetriever, chunk, collect, completed, request
from tests.fakes.openai_server import ChatReply, ErrorReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")


def model_for(fake: FakeOpenAI, **options: float) -> tuple[OpenAIChatModel, openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url, max_retries=2)
    values = {"timeout": 5.0, "idle_timeout": 0.3, "first_token_timeout": 2.0} | options
    model = OpenAIChatModel(
        client,
        model="m",
        max_tokens=64,
        timeout=values["timeout"],
        idle_timeout=values["idle_timeout"],
        first_token_timeout=values["first_token_timeout"],
    )
    return model, client


async def run_turn(model: OpenAIChatModel) -> list[object]:
    messages = [{"role": "user", "content": "hi"}]
    return [e async for e in model.stream(messages, temperature=0, deadline=Deadline.after(10))]


async def test_a_slow_first_token_is_not_a_stall(fake_openai: FakeOpenAI) -> None:
    # A CPU server reads the prompt before it sends anything: longer than the idle timeout.
    fake_openai.script_chat(ChatReply.text("ok", delay=0.8))
    model, client = model_for(fake_openai, idle_timeout=0.3, first_token_timeout=3.0)
    async with client:
        events = await run_turn(model)
    assert isinstance(events[-1], TurnEnd)


async def test_no_first_token_in_time_is_a_stall_and_never_retried(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script_chat(ChatReply.text("late", delay=3.0), ChatReply.text("never asked"))
    model, client = model_for(fake_openai, first_token_timeout=0.5)
    began = time.monotonic()
    async with client:
        with pytest.raises(ModelStalled) as caught:
            await run_turn(model)
    assert time.monotonic() - began < 2.0
    assert "RAGAGENT_LLM_FIRST_TOKEN_TIMEOUT" in caught.value.message
    assert len(fake_openai.chat_requests) == 1, "a stalled call is not sent again"


async def test_a_500_about_the_request_is_rejected_not_retried(fake_openai: FakeOpenAI) -> None:
    body = (
        "1 validation error for CreateChatCompletionRequest\ntools.0: Field required " + "x" * 500
    )
    fake_openai.script_chat(ErrorReply(500, body), ChatReply.text("never asked"))
    model, client = model_for(fake_openai)
    async with client:
        with pytest.raises(ModelRequestRejected) as caught:
            await run_turn(model)
    assert "validation error" in caught.value.message
    assert len(fake_openai.chat_requests) == 1
    assert "x" * 300 not in caught.value.message, "the endpoint's message is clipped at 300"


async def test_another_500_is_retried_and_keeps_the_endpoints_words(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script_chat(ErrorReply(503, "model is loading"), ChatReply.text("ok"))
    model, client = model_for(fake_openai)
    async with client:
        events = await run_turn(model)
    assert isinstance(events[-1], TurnEnd)
    assert len(fake_openai.chat_requests) == 2

    fake_openai.script_chat(*[ErrorReply(500, "CUDA out of memory")] * 3)
    async with openai.AsyncOpenAI(api_key="k", base_url=fake_openai.base_url) as client:
        model = OpenAIChatModel(client, model="m", max_tokens=8, timeout=5, idle_timeout=1)
        with pytest.raises(ModelUnavailable) as caught:
            await run_turn(model)
    assert "HTTP 500: CUDA out of memory" in caught.value.message


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 4096 tokens. However, you requested 5000",
        "Requested tokens (5123) exceed context window of 4096",
    ],
)
async def test_a_context_overflow_is_model_context_exceeded(
    fake_openai: FakeOpenAI, message: str
) -> None:
    fake_openai.script_chat(ErrorReply(400, message))
    model, client = model_for(fake_openai)
    async with client:
        with pytest.raises(ModelContextExceeded) as caught:
            await run_turn(model)
    assert caught.value.reason == "MODEL_CONTEXT_EXCEEDED"
    assert "4096" in caught.value.message


@contextmanager
def unaccepting_endpoint() -> Iterator[str]:
    """The base URL of a server that accepts no connection: its listen backlog is full (a
    model server whose loop is too busy to accept), so a connect attempt hangs."""
    with ExitStack() as stack:
        server = stack.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(4):  # more than the backlog holds: the next SYN goes unanswered
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            # In progress (BlockingIOError): it holds its place in the queue all the same.
            with suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield f"http://127.0.0.1:{port}/v1"


async def test_an_endpoint_that_accepts_no_connection_is_unavailable_not_a_deadline() -> None:
    # The request was never sent and most of the deadline is left: the soak saw this reported
    # as DEADLINE_EXCEEDED ("the deadline ran out waiting for the model") after 50-60 s of 120.
    with unaccepting_endpoint() as base_url:
        client = openai.AsyncOpenAI(api_key="k", base_url=base_url, max_retries=0)
        model = OpenAIChatModel(
            client, model="m", max_tokens=64, timeout=0.5, idle_timeout=0.3, first_token_timeout=30
        )
        async with client:
            with pytest.raises(ModelUnavailable) as caught:
                await run_turn(model)  # a 10 s deadline: far from run out
    assert caught.value.message == "the model endpoint accepted no connection in 0.5 s"


def test_one_mapper_for_the_chat_model_and_the_embedder() -> None:
    request_ = openai.APITimeoutError(request=__import__("httpx").Request("POST", "http://x"))
    chat = endpoint_error(request_, None)
    embed = endpoint_error(request_, None, unavailable=EmbedderUnavailable, what="the embedder")
    assert type(chat) is ModelUnavailable
    assert isinstance(embed, EmbedderUnavailable)
    assert isinstance(chat, RagAgentError)
    assert chat.code == embed.code


async def test_llama_cpp_python_streamed_tools_come_back_empty_so_a_plain_turn_decides(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("urdf links", (LINK, 0.8))
    fake_openai.probe_reply = ChatReply.empty_body()  # stream + tool_choice "auto"
    fake_openai.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "urdf links"}', id="c1")),
        ChatReply.text("A link is a rigid body [1]."),
    )
    agent = build_agentic(retriever, llm_tool_calling="auto")

    result = completed(await collect(agent.run(request(QUESTION)))).result

    assert result.answer == "A link is a rigid body [1]."
    [probe] = fake_openai.probe_requests
    assert probe.streamed
    assert probe.body["tool_choice"] == "auto"
    decide, answer = fake_openai.chat_requests
    assert (decide.streamed, answer.streamed) == (False, False)
    assert decide.body["tool_choice"] == "auto"
    assert [c.origin for c in result.tool_calls] == ["service", "model"]


def test_the_model_reasons_are_documented() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    table = readme[readme.index("| status | reasons |") :].split("\n\n")[0]
    row = next(line for line in table.splitlines() if "`FAILED_PRECONDITION`" in line)
    errors_doc = (root / "docs" / "errors.md").read_text()
    for reason in ("MODEL_REQUEST_REJECTED", "MODEL_CONTEXT_EXCEEDED"):
        assert f"`{reason}`" in row, f"README's error table lacks {reason}"
        assert f"`{reason}`" in errors_doc, f"docs/errors.md lacks {reason}"
