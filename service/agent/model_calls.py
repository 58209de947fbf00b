"""One Chat Completions request and the chunks of its answer, as the chat model sends and
reads them: retries before the answer began (429, 5xx that are not about the request,
unreachable endpoints) with backoff and within the deadline, never after a timeout; and each
chunk read within the stream's clock. :class:`~service.agent.model.OpenAIChatModel` decides
what to ask and what the chunks add up to; this decides how the asking survives the network.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
import httpx2
import openai

from service.agent.assembly import Assembly
from service.agent.model_errors import model_error, retryable, stream_broke
from service.agent.wait_clock import WaitClock
from service.domain import Deadline
from service.errors import DeadlineExceeded, ModelStalled, ModelUnavailable, RagAgentError

_CONNECT_TIMEOUT_S = 10.0
_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)


class ModelCalls:
    """Requests to one endpoint through its AsyncOpenAI client."""

    def __init__(self, client: openai.AsyncOpenAI, *, timeout: float) -> None:
        # Retries are this class's (so that a stall is never retried); the SDK makes none.
        self._client = client.with_options(max_retries=0)
        self._retries = client.max_retries
        self._timeout = timeout

    @property
    def api_key(self) -> str:
        return self._client.api_key

    async def send(
        self, request: dict[str, Any], deadline: Deadline, read_s: float, *, streamed: bool = False
    ) -> Any:
        """Sends the request; retries what may succeed later, never a timeout.

        A streamed request goes through the SDK's own request path (key, headers, HTTP status
        errors, server-sent events, an error event in the stream) but yields each chunk as
        the decoded JSON: the SDK's typed chunks cost 3x the CPU of the rest (see
        :mod:`service.agent.assembly`).
        """
        attempt = 0
        while True:
            left = deadline.remaining()
            if left is not None and left <= 0:
                raise DeadlineExceeded("the deadline ran out before the model was called")
            connect_s = min(_CONNECT_TIMEOUT_S, self._timeout)
            timeout = httpx.Timeout(read_s, connect=connect_s)
            try:
                async with asyncio.timeout(left):
                    if streamed:
                        return await cast(Any, self._client).post(
                            "/chat/completions",
                            body=request,
                            cast_to=object,
                            options={"timeout": timeout},
                            stream=True,
                            stream_cls=openai.AsyncStream[Any],
                        )
                    return await cast(Any, self._client.chat.completions).create(
                        **request, timeout=timeout
                    )
            except TimeoutError:
                raise DeadlineExceeded("the deadline ran out while waiting for the model") from None
            except openai.APITimeoutError as exc:
                if not isinstance(exc.__cause__, httpx2.ConnectTimeout):  # the SDK's HTTP client
                    if left is not None and left <= read_s:
                        ran_out = "the deadline ran out waiting for the model"
                        raise DeadlineExceeded(ran_out) from None
                    raise ModelStalled(
                        f"the model sent nothing for {read_s:g} s "
                        "(RAGAGENT_LLM_FIRST_TOKEN_TIMEOUT); not retried: the server is still "
                        "busy with the request"
                    ) from None
                # No connection within connect_s: the request was never sent, so the endpoint
                # is unreachable for now (retried like a refused connection); the deadline,
                # with time left, is not what ran out (the soak saw this reported as one).
                failure: Exception = exc
                error: RagAgentError = ModelUnavailable(
                    f"the model endpoint accepted no connection in {connect_s:g} s"
                )
            except (openai.OpenAIError, ValueError) as exc:
                failure, error = exc, model_error(exc, deadline)
            if attempt >= self._retries or not retryable(error):
                raise error from failure
            delay = 0.0 if attempt == 0 and _hung_up(failure) else _backoff(error, attempt)
            left = deadline.remaining()
            if left is not None and left <= delay:
                raise error from failure
            attempt += 1
            await asyncio.sleep(delay)

    async def next_chunk(
        self,
        response: openai.AsyncStream[Any],
        deadline: Deadline,
        waits: WaitClock,
        *,
        wait: float,
        clock: str,
        turn: Assembly,
    ) -> object | None:
        left = deadline.remaining()
        bound = max(0.0, wait if left is None else min(wait, left))
        try:
            waits.begin(bound)
            try:
                return await anext(response)
            finally:
                cut = waits.end()
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not cut:
                raise  # the caller's cancellation
            if left is not None and left <= wait:
                raise DeadlineExceeded("the deadline ran out while the model was writing") from None
            raise ModelStalled(
                f"the model stream sent nothing for {wait:.3g} s ({clock})"
            ) from None
        except openai.APITimeoutError as exc:
            raise model_error(exc, deadline) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            if turn.finish_reason:
                return None  # the answer is whole; only the usage chunk after it was lost
            # The body broke after the response began (reset, EOF mid-chunk). This SDK wraps
            # transport errors; others let httpx's own escape, which must not become INTERNAL.
            raise stream_broke(exc) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise model_error(exc, deadline) from exc


def _hung_up(failure: Exception) -> bool:
    """The connection broke before any answer: most often a pooled keep-alive connection the
    server had closed (llama-cpp-python's after a stream), which a new connection fixes at
    once, so the first retry does not wait (a short deadline may have no room to)."""
    cause = failure.__cause__ if isinstance(failure, openai.APIConnectionError) else None
    return isinstance(cause, httpx2.ReadError | httpx2.RemoteProtocolError | httpx2.WriteError)


def _backoff(error: RagAgentError, attempt: int) -> float:
    hinted = getattr(error, "retry_after_s", None)
    base = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
    return max(base, min(float(hinted), 30.0)) if isinstance(hinted, int | float) else base
