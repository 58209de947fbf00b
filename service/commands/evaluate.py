"""``ragagent eval QUESTIONS.jsonl``: retrieval (and answer) quality, measured over gRPC.

Every question goes through AgentService.Retrieve, with or without ``--address``: without
it, the real server is started in this process on a free loopback port, so that what is
measured is exactly what clients get. Retrieval asks for the ``k`` nearest sources at
threshold 0 and the threshold is applied while scoring, so that one run shows both the
ranking (recall, MRR) and what the threshold rejects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.commands.channel import add_connection_flags, connection, in_process, open_channel
from service.commands.flags import Flag, settings_with_flags
from service.commands.ingest import RuntimeOpener, rpc_error_lines
from service.config import Settings
from service.errors import ConfigurationError
from service.evaluation import (
    EvalQuestion,
    EvaluationReport,
    GeneratedAnswer,
    QuestionsFileError,
    RetrievedDocument,
    evaluate,
    load_questions,
)
from service.observability.logging import configure_logging

MAX_RETRIEVE_RESULTS = 20  # RetrieveRequest.max_results
MAX_ASK_RESULTS = 10  # QuestionRequest.max_results
STRATEGIES = ("extractive", "retrieve_first", "agentic")


def _strategy_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"not a strategy: {', '.join(unknown) or text!r} (one of {', '.join(STRATEGIES)})"
        )
    return list(dict.fromkeys(names))


def _bounded(kind: type[int] | type[float], low: float, high: float) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}")
        return value

    return parse


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="score retrieval (and answers) against a file of test questions",
        description="Runs each question through Retrieve (and Ask with --answers) and reports "
        "recall@k, MRR and the share of unanswerable questions rejected by the threshold. "
        "Exits 1 when a --min-* target is missed.",
    )
    parser.add_argument("questions", type=Path, metavar="QUESTIONS.jsonl")
    parser.add_argument(
        "--address", help="HOST:PORT of a running server (default: start one in this process)"
    )
    unit = _bounded(float, 0.0, 1.0)
    parser.add_argument(
        "--k", type=_bounded(int, 1, MAX_RETRIEVE_RESULTS), default=5, help="results per question"
    )
    parser.add_argument(
        "--threshold", type=unit, help="minimum score (default: RAGAGENT_CONFIDENCE_THRESHOLD)"
    )
    parser.add_argument("--answers", action="store_true", help="also ask each question")
    parser.add_argument(
        "--strategies",
        type=_strategy_list,
        help="ask each question once per strategy (comma-separated: "
        f"{', '.join(STRATEGIES)}) and report each one's answers; implies --answers; "
        "in-process only (a running server answers with its own strategy)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument("--min-recall", type=unit, help="exit 1 when recall@k is lower")
    parser.add_argument("--min-mrr", type=unit, help="exit 1 when MRR is lower")
    parser.add_argument(
        "--min-rejection", type=unit, help="exit 1 when fewer unanswerable ones are rejected"
    )
    parser.add_argument(
        "--concurrency", type=_bounded(int, 1, 64), default=4, help="questions at a time"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    add_connection_flags(parser)
    parser.set_defaults(run=run_eval)


async def run_eval(args: argparse.Namespace) -> int:
    # --address is checked here, like every flag that stands for a setting, though only
    # the flag's value is used: without it the server runs in this process on a free port.
    settings = settings_with_flags(Flag("--address", "address", args.address))
    # Logs go to stderr, so that stdout holds only the report (and --json stays parseable).
    configure_logging(settings.log_level, settings.log_format)
    return await eval_command(args, settings=settings)


async def eval_command(
    args: argparse.Namespace,
    *,
    settings: Settings,
    open_runtime: RuntimeOpener | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The command with its dependencies given: the exit code, the report on ``out``."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        questions = load_questions(args.questions)
    except (OSError, QuestionsFileError) as error:
        print(f"ragagent: {error}", file=err)
        return 2
    if not questions:
        print(f"ragagent: {args.questions}: no questions", file=err)
        return 2
    threshold = settings.confidence_threshold if args.threshold is None else args.threshold
    strategies: list[str] = args.strategies or []
    if strategies and args.address:
        print(
            "ragagent: --strategies needs the server in this process (without --address): "
            "a running server answers with its own strategy",
            file=err,
        )
        return 2
    runs = [settings.model_copy(update={"agent_strategy": s}) for s in strategies] or [settings]
    answers_by: dict[str, dict[str, GeneratedAnswer]] = {}
    retrieved: dict[str, list[RetrievedDocument]] = {}
    try:
        for index, run_settings in enumerate(runs):
            async with _agent_channel(args, run_settings, open_runtime) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                options = {"concurrency": args.concurrency, "timeout": args.timeout}
                if index == 0:  # retrieval does not depend on the strategy: scored once
                    retrieved, answers = await ask_questions(
                        stub,
                        questions,
                        k=args.k,
                        threshold=threshold,
                        with_answers=args.answers or bool(strategies),
                        **options,
                    )
                else:
                    answers = await answer_questions(
                        stub, questions, k=args.k, threshold=threshold, **options
                    )
            if answers is not None:
                label = strategies[index] if strategies else _reported_strategy(answers)
                answers_by[label] = answers
    except grpc.aio.AioRpcError as error:
        print("\n".join(rpc_error_lines(error)), file=err)
        return 1
    except ConfigurationError as error:
        print(f"ragagent: {error}", file=err)
        return 2
    first = next(iter(answers_by.values()), None)
    report = evaluate(questions, retrieved, k=args.k, threshold=threshold, answers=first)
    report = replace(
        report,
        strategies=tuple(
            evaluate(questions, retrieved, k=args.k, threshold=threshold, answers=a).answer_scores(
                label
            )
            for label, a in answers_by.items()
        ),
    )
    misses = missed_targets(
        report, recall=args.min_recall, mrr=args.min_mrr, rejection=args.min_rejection
    )
    if args.json:
        print(json.dumps({**report.to_dict(), "missed_targets": misses}), file=out)
    else:
        print(report.render_table(), file=out)
    for miss in misses:
        print(f"ragagent: target missed: {miss}", file=err)
    return 1 if misses else 0


@asynccontextmanager
async def _agent_channel(
    args: argparse.Namespace, settings: Settings, open_runtime: RuntimeOpener | None
) -> AsyncIterator[grpc.aio.Channel]:
    if args.address:
        async with open_channel(connection(args, args.address)) as channel:
            yield channel
        return
    from service.runtime import Runtime
    from service.server import AgentServer

    local = in_process(settings)
    runtime = await (open_runtime or Runtime.open)(local)
    try:
        server = AgentServer(local, runtime)
        port = await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield channel
        finally:
            await server.stop(0)
    finally:
        await runtime.close()


async def ask_questions(
    stub: agent_pb2_grpc.AgentServiceAsyncStub,
    questions: Sequence[EvalQuestion],
    *,
    k: int,
    threshold: float,
    with_answers: bool = False,
    concurrency: int = 4,
    timeout: float | None = None,  # noqa: ASYNC109 (per call, passed to gRPC as its deadline)
) -> tuple[dict[str, list[RetrievedDocument]], dict[str, GeneratedAnswer] | None]:
    """Each question's ranked documents (and answer), ``concurrency`` questions at a time."""
    retrieved: dict[str, list[RetrievedDocument]] = {}
    answers: dict[str, GeneratedAnswer] = {}
    gate = asyncio.Semaphore(concurrency)

    async def one(question: EvalQuestion) -> None:
        async with gate:
            found = await stub.Retrieve(
                # Threshold 0: the ranking is scored as it is; evaluate() applies the threshold.
                agent_pb2.RetrieveRequest(
                    query=question.question, max_results=k, confidence_threshold=0.0
                ),
                timeout=timeout,
            )
            retrieved[question.id] = [
                RetrievedDocument(s.document_id, s.score) for s in found.sources
            ]
            if with_answers:
                answers[question.id] = await _answer(stub, question, k, threshold, timeout)

    try:
        async with asyncio.TaskGroup() as group:
            for question in questions:
                group.create_task(one(question))
    except ExceptionGroup as failed:
        # The first failure is the one to report; the others are usually the same one.
        raise failed.exceptions[0] from None
    return retrieved, (answers if with_answers else None)


async def answer_questions(
    stub: agent_pb2_grpc.AgentServiceAsyncStub,
    questions: Sequence[EvalQuestion],
    *,
    k: int,
    threshold: float,
    concurrency: int = 4,
    timeout: float | None = None,  # noqa: ASYNC109 (per call, passed to gRPC as its deadline)
) -> dict[str, GeneratedAnswer]:
    """Each question's answer through Ask, ``concurrency`` questions at a time."""
    gate = asyncio.Semaphore(concurrency)
    answers: dict[str, GeneratedAnswer] = {}

    async def one(question: EvalQuestion) -> None:
        async with gate:
            answers[question.id] = await _answer(stub, question, k, threshold, timeout)

    async with asyncio.TaskGroup() as group:  # _answer raises nothing: failures are scored
        for question in questions:
            group.create_task(one(question))
    return answers


async def _answer(
    stub: agent_pb2_grpc.AgentServiceAsyncStub,
    question: EvalQuestion,
    k: int,
    threshold: float,
    timeout: float | None,  # noqa: ASYNC109 (per call, passed to gRPC as its deadline)
) -> GeneratedAnswer:
    try:
        reply = await stub.Ask(
            agent_pb2.QuestionRequest(
                query=question.question,
                max_results=min(k, MAX_ASK_RESULTS),
                confidence_threshold=threshold,
            ),
            timeout=timeout,
        )
    except grpc.aio.AioRpcError as error:
        # One slow or failing answer is a scored failure, not the end of the run: the
        # report is what a run with a real model is for.
        code = error.code().name if error.code() is not None else "UNKNOWN"
        return GeneratedAnswer("", error=f"{code}: {error.details() or ''}"[:300])
    return GeneratedAnswer(
        reply.answer,
        no_answer=reply.status == agent_pb2.RESPONSE_STATUS_NO_ANSWER,
        strategy=reply.strategy,
    )


def _reported_strategy(answers: dict[str, GeneratedAnswer]) -> str:
    """What the server says it ran ("agentic+retrieve_first" when a fallback mixed them)."""
    names = sorted({a.strategy for a in answers.values() if a.strategy})
    return "+".join(names) or "server"


def missed_targets(
    report: EvaluationReport,
    *,
    recall: float | None = None,
    mrr: float | None = None,
    rejection: float | None = None,
) -> list[str]:
    """One line per target that was given and not met (a score nobody could earn misses)."""
    checks = (
        (f"recall@{report.k}", recall, report.recall_at_k),
        ("MRR", mrr, report.mrr),
        ("rejection", rejection, report.rejection_rate),
    )
    misses = []
    for name, target, value in checks:
        if target is None:
            continue
        if value is None:
            misses.append(f"{name}: no question measures it (target {target:.3f})")
        elif value < target:
            misses.append(f"{name} {value:.3f} < target {target:.3f}")
    return misses
