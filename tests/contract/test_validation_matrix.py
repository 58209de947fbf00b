"""Every protovalidate rule of every request message, at its boundary.

Each row of the matrix names one rule of the contract and gives the last value it accepts
and the first value it rejects (exactly at the limit: valid; one past it: invalid). The
invalid message must produce exactly the listed violations, each at the field path clients
see in ``google.rpc.BadRequest`` (``filters.module``, ``metadata["bad key"]``,
``document.path``) with the protovalidate rule id as its reason.

``test_every_declared_rule_has_a_row`` reads the rules out of the descriptors, so a rule
added to a .proto without a row here fails the suite.

Lengths are counted as protovalidate counts them: ``min_len``/``max_len`` in characters
(Unicode code points, so "é" and "🤖" count one each), ``max_bytes`` in UTF-8 bytes.
Float limits are checked with the nearest float32 values, since the fields are ``float``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from buf.validate import validate_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from ragagent.v1 import agent_pb2, corpus_pb2, session_pb2, types_pb2

from service.api.interceptors import validate
from service.errors import InvalidArgument
from tests.contract.descriptors import PACKAGE, request_messages

UUID = "3f2b6c1e-8a4d-4f6b-9c2e-1d7a5b9e0f42"
UUID_ONE_SHORT = UUID[:-1]
MIB = 1024 * 1024


def below(limit: float) -> float:
    """The largest float32 smaller than ``limit``: the first value past a lower bound."""
    return float(np.nextafter(np.float32(limit), np.float32(-math.inf)))


def above(limit: float) -> float:
    """The smallest float32 larger than ``limit``: the first value past an upper bound."""
    return float(np.nextafter(np.float32(limit), np.float32(math.inf)))


def violations_of(message: Message) -> list[tuple[str, str]]:
    """(field path, rule id) of every violation, as the interceptor reports them."""
    try:
        validate(message)
    except InvalidArgument as error:
        return sorted((v.field, v.reason) for v in error.violations)
    return []


# --- Valid messages to vary one field of ------------------------------------------------


def question(**fields: Any) -> agent_pb2.QuestionRequest:
    return agent_pb2.QuestionRequest(**{"query": "How do ROS 2 nodes talk?", **fields})


def retrieve(**fields: Any) -> agent_pb2.RetrieveRequest:
    return agent_pb2.RetrieveRequest(**{"query": "URDF inertia", **fields})


def ingest_document(**fields: Any) -> corpus_pb2.IngestDocumentsRequest:
    document = {"path": "module-01/chapter-01/page-01-intro.md", "content": "# Intro", **fields}
    return corpus_pb2.IngestDocumentsRequest(document=corpus_pb2.Document(**document))


def ingest_options(**fields: Any) -> corpus_pb2.IngestDocumentsRequest:
    return corpus_pb2.IngestDocumentsRequest(options=corpus_pb2.IngestOptions(**fields))


def delete_document(**fields: Any) -> corpus_pb2.DeleteDocumentRequest:
    return corpus_pb2.DeleteDocumentRequest(**{"document_id": "module-01/page-01.md", **fields})


def run_rows(build: Any) -> list[Row]:
    """A run id: 1 to 64 characters (unknown ones are NOT_FOUND, not invalid)."""
    return [
        Row("run_id", "string.min_len", build(run_id="r"), build(run_id="")),
        Row("run_id", "string.max_len", build(run_id="r" * 64), build(run_id="r" * 65)),
    ]  # fmt: skip


def list_documents(**fields: Any) -> corpus_pb2.ListDocumentsRequest:
    return corpus_pb2.ListDocumentsRequest(**fields)


def get_session(**fields: Any) -> session_pb2.GetSessionRequest:
    return session_pb2.GetSessionRequest(**{"session_id": UUID, **fields})


def delete_session(**fields: Any) -> session_pb2.DeleteSessionRequest:
    return session_pb2.DeleteSessionRequest(**{"session_id": UUID, **fields})


def list_sessions(**fields: Any) -> session_pb2.ListSessionsRequest:
    return session_pb2.ListSessionsRequest(**fields)


# --- The matrix ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One rule: the last value it accepts, the first it rejects, and where it says so."""

    path: str
    rule: str
    valid: Message
    invalid: Message
    note: str = ""
    # Other violations the invalid value causes as well (the report must list them all).
    also: tuple[tuple[str, str], ...] = ()
    # Map rules: whether the row exercises the keys' or the values' rules. The reported
    # path is the same for both (``metadata["k"]``); the completeness check tells them apart.
    map_part: str = ""

    @property
    def id(self) -> str:
        name = f"{type(self.valid).__name__}.{self.path}:{self.rule}"
        return f"{name}:{self.note}" if self.note else name


def query_rows(build: Any) -> list[Row]:
    """QuestionRequest.query and RetrieveRequest.query: 1 to 1000 characters, not blank."""
    return [
        Row("query", "string.min_len", build(query="?"), build(query=""),
            also=(("query", "string.not_blank"),)),
        Row("query", "string.max_len", build(query="a" * 1000), build(query="a" * 1001),
            note="ascii"),
        Row("query", "string.max_len", build(query="é" * 1000), build(query="é" * 1001),
            note="two-byte characters count once"),
        Row("query", "string.max_len", build(query="🤖" * 1000), build(query="🤖" * 1001),
            note="four-byte characters count once"),
        Row("query", "string.not_blank", build(query=" \t\nx\n\t "), build(query="   "),
            note="spaces"),
        Row("query", "string.not_blank", build(query="\tx"), build(query="\t\t"), note="tabs"),
        Row("query", "string.not_blank", build(query="\nx"), build(query="\n\r\n"),
            note="newlines"),
        Row("query", "string.not_blank", build(query=" x"), build(query=" \t\r\n\f"),
            note="mixed"),
    ]  # fmt: skip


def max_results_rows(build: Any, upper: int) -> list[Row]:
    """An optional int32: unset means the server's default, an explicit 0 is invalid."""
    return [
        Row("max_results", "int32.gte_lte", build(max_results=1), build(max_results=0),
            note="explicit zero"),
        Row("max_results", "int32.gte_lte", build(max_results=1), build(max_results=-1),
            note="negative"),
        Row("max_results", "int32.gte_lte", build(max_results=upper),
            build(max_results=upper + 1), note="upper"),
    ]  # fmt: skip


def float_range_rows(build: Any, field: str, upper: float) -> list[Row]:
    """An optional float in [0, upper]: the float32 neighbours of both limits, and NaN."""
    return [
        Row(field, "float.gte_lte", build(**{field: 0.0}), build(**{field: below(0.0)}),
            note="lower"),
        Row(field, "float.gte_lte", build(**{field: upper}), build(**{field: above(upper)}),
            note="upper"),
        Row(field, "float.gte_lte", build(**{field: upper / 2}), build(**{field: math.nan}),
            note="nan"),
        Row(field, "float.gte_lte", build(**{field: upper}), build(**{field: math.inf}),
            note="infinity"),
    ]  # fmt: skip


def filters_rows(build: Any) -> list[Row]:
    """SearchFilters, reported under the request's ``filters`` field."""

    def filters(**fields: str) -> Message:
        return build(filters=types_pb2.SearchFilters(**fields))

    return [
        Row("filters.module", "string.max_len", filters(module="m" * 200),
            filters(module="m" * 201)),
        Row("filters.chapter", "string.max_len", filters(chapter="é" * 200),
            filters(chapter="é" * 201), note="characters, not bytes"),
        Row("filters.url_prefix", "string.max_len", filters(url_prefix="u" * 2048),
            filters(url_prefix="u" * 2049)),
    ]  # fmt: skip


def optional_uuid_rows(build: Any, field: str) -> list[Row]:
    """A UUID that may be left empty (the rule ignores the zero value)."""
    return [
        Row(field, "string.uuid", build(**{field: UUID}), build(**{field: UUID_ONE_SHORT}),
            note="one character short"),
        Row(field, "string.uuid", build(**{field: UUID.upper()}),
            build(**{field: UUID.replace("-", "")}), note="without hyphens"),
        Row(field, "string.uuid", build(**{field: UUID}), build(**{field: f"{{{UUID}}}"}),
            note="braces"),
    ]  # fmt: skip


def required_uuid_rows(build: Any) -> list[Row]:
    """A UUID that must be given: empty is its own rule, ``string.uuid_empty``."""
    return [
        *optional_uuid_rows(build, "session_id"),
        Row("session_id", "string.uuid_empty", build(session_id=UUID), build(session_id=""),
            note="missing"),
    ]  # fmt: skip


def metadata_rows() -> list[Row]:
    """QuestionRequest.metadata: up to 16 pairs; keys 1-64 of [A-Za-z0-9_.-]; values <= 256."""
    sixteen = {f"k{i}": "v" for i in range(16)}
    key_64, key_65 = "k" * 64, "k" * 65
    return [
        Row("metadata", "map.max_pairs", question(metadata=sixteen),
            question(metadata={**sixteen, "k16": "v"})),
        Row('metadata[""]', "string.min_len", question(metadata={"k": "v"}),
            question(metadata={"": "v"}), also=(('metadata[""]', "string.pattern"),),
            map_part="key"),
        Row(f'metadata["{key_65}"]', "string.max_len", question(metadata={key_64: "v"}),
            question(metadata={key_65: "v"}), note="key", map_part="key"),
        Row('metadata["bad key"]', "string.pattern",
            question(metadata={"client.name_v-1": "v"}), question(metadata={"bad key": "v"}),
            note="space", map_part="key"),
        Row('metadata["naïve"]', "string.pattern", question(metadata={"naive": "v"}),
            question(metadata={"naïve": "v"}), note="non-ascii", map_part="key"),
        Row('metadata["a/b"]', "string.pattern", question(metadata={"a_b": "v"}),
            question(metadata={"a/b": "v"}), note="slash", map_part="key"),
        Row('metadata["client"]', "string.max_len", question(metadata={"client": "v" * 256}),
            question(metadata={"client": "v" * 257}), note="value", map_part="value"),
        Row('metadata["client"]', "string.max_len", question(metadata={"client": "é" * 256}),
            question(metadata={"client": "é" * 257}), note="value in characters",
            map_part="value"),
    ]  # fmt: skip


def document_rows() -> list[Row]:
    """Document (in IngestDocumentsRequest.document): a relative .md/.mdx path, <= 2 MiB."""
    at_limit = "d" * 1021 + ".md"
    return [
        Row("document.path", "string.min_len", ingest_document(path="a.md"),
            ingest_document(path=""),
            also=(("document.path", "path.relative"), ("document.path", "string.pattern"))),
        Row("document.path", "string.max_len", ingest_document(path=at_limit),
            ingest_document(path="d" + at_limit)),
        Row("document.path", "string.pattern", ingest_document(path="a.mdx"),
            ingest_document(path="a.txt"), note="extension"),
        Row("document.path", "string.pattern", ingest_document(path="a.md"),
            ingest_document(path="a.MD"), note="extension is case-sensitive"),
        Row("document.path", "string.pattern", ingest_document(path="a.md"),
            ingest_document(path="a.markdown"), note="only md and mdx"),
        Row("document.path", "string.pattern", ingest_document(path="docs/a.md"),
            ingest_document(path="/docs/a.md"), note="leading slash",
            also=(("document.path", "path.relative"),)),
        Row("document.path", "string.pattern", ingest_document(path="docs/a.md"),
            ingest_document(path="docs/a.md/"), note="trailing slash",
            also=(("document.path", "path.relative"),)),
        Row("document.path", "path.relative", ingest_document(path="a/..b/c..md"),
            ingest_document(path="a/../b.md"), note="dot-dot segment"),
        Row("document.path", "path.relative", ingest_document(path="..a.md"),
            ingest_document(path="../a.md"), note="leading dot-dot"),
        Row("document.path", "path.relative", ingest_document(path=".a/b.md"),
            ingest_document(path="./a.md"), note="leading dot"),
        Row("document.path", "path.relative", ingest_document(path="a/.b/c.md"),
            ingest_document(path="a/./b.md"), note="dot segment"),
        Row("document.path", "path.relative", ingest_document(path="a/b.md"),
            ingest_document(path="a\\b.md"), note="backslash"),
        Row("document.path", "path.relative", ingest_document(path="a/b.md"),
            ingest_document(path="a//b.md"), note="empty segment"),
        Row("document.path", "path.relative", ingest_document(path="a/b.md"),
            ingest_document(path="a/\x00.md"), note="control character"),
        Row("document.content", "string.max_bytes", ingest_document(content="x" * (2 * MIB)),
            ingest_document(content="x" * (2 * MIB + 1))),
        Row("document.content", "string.max_bytes", ingest_document(content="é" * MIB),
            ingest_document(content="é" * MIB + "x"), note="bytes, not characters"),
    ]  # fmt: skip


def ingest_options_rows() -> list[Row]:
    """IngestOptions.base_url: a URI, or empty for no URLs."""
    return [
        Row("options.base_url", "string.uri", ingest_options(base_url="https://example.dev/"),
            ingest_options(base_url="example.dev/"), note="no scheme",
            also=(("options.base_url", "base_url.http"),)),
        Row("options.base_url", "base_url.http", ingest_options(base_url="http://example.dev"),
            ingest_options(base_url="mailto:docs@example.dev"), note="not a site URL"),
        Row("options.base_url", "base_url.http", ingest_options(base_url="HTTPS://x.dev/"),
            ingest_options(base_url="ftp://example.dev/"), note="not http"),
        Row("options.base_url", "string.uri",
            ingest_options(base_url="https://example.dev/docs/"),
            ingest_options(base_url="https://example.dev/my docs/"), note="space"),
    ]  # fmt: skip


def document_access_rows() -> list[Row]:
    """IngestOptions.access: up to 100 unique names of 1-128 printable characters each."""
    rows = []
    for field in ("groups", "principals"):
        path = f"options.access.{field}"

        def access(names: list[str], field: str = field) -> Message:
            return ingest_options(access=corpus_pb2.DocumentAccess(**{field: names}))

        rows += [
            Row(f"{path}[0]", "string.min_len", access(["a"]), access([""]),
                also=((f"{path}[0]", "string.pattern"),)),
            Row(f"{path}[0]", "string.max_len", access(["a" * 128]), access(["a" * 129])),
            Row(f"{path}[0]", "string.pattern", access(["Domain Users"]), access(["a\x01"]),
                note="control character"),
            Row(path, "repeated.max_items", access([f"g{i}" for i in range(100)]),
                access([f"g{i}" for i in range(101)])),
            Row(path, "repeated.unique", access(["a", "b"]), access(["a", "a"])),
        ]  # fmt: skip
    return rows


def page_rows(build: Any, max_page_size: int) -> list[Row]:
    """page_size 0 (the server's default) to max; page_token at most 2048 characters."""
    return [
        Row("page_size", "int32.gte_lte", build(page_size=0), build(page_size=-1),
            note="lower"),
        Row("page_size", "int32.gte_lte", build(page_size=max_page_size),
            build(page_size=max_page_size + 1), note="upper"),
        Row("page_token", "string.max_len", build(page_token="t" * 2048),
            build(page_token="t" * 2049)),
    ]  # fmt: skip


MATRIX: list[Row] = [
    # agent.proto: QuestionRequest
    *query_rows(question),
    *max_results_rows(question, upper=10),
    *float_range_rows(question, "confidence_threshold", upper=1.0),
    *optional_uuid_rows(question, "session_id"),
    *float_range_rows(question, "temperature", upper=2.0),
    *filters_rows(question),
    *metadata_rows(),
    *optional_uuid_rows(question, "request_id"),
    # Per-request model settings: the allow-list of `model` is the server's (test_model_settings)
    Row("model", "string.max_len", question(model="m" * 256), question(model="m" * 257)),
    Row("max_tokens", "int32.gte_lte", question(max_tokens=1), question(max_tokens=0),
        note="lower"),
    Row("max_tokens", "int32.gte_lte", question(max_tokens=8192), question(max_tokens=8193),
        note="upper"),
    Row("instructions", "string.max_len", question(instructions="é" * 2000),
        question(instructions="é" * 2001)),
    # agent.proto: RetrieveRequest
    *query_rows(retrieve),
    *max_results_rows(retrieve, upper=20),
    *float_range_rows(retrieve, "confidence_threshold", upper=1.0),
    *filters_rows(retrieve),
    # agent.proto: background runs
    *run_rows(agent_pb2.ResumeStreamRequest),
    *run_rows(agent_pb2.CancelRunRequest),
    # corpus.proto
    *document_rows(),
    *ingest_options_rows(),
    *document_access_rows(),
    Row("document_id", "string.min_len", delete_document(document_id="a.md"),
        delete_document(document_id=""),
        also=(("document_id", "path.relative"), ("document_id", "string.pattern"))),
    Row("document_id", "string.max_len", delete_document(document_id="d" * 1021 + ".md"),
        delete_document(document_id="d" * 1022 + ".md")),
    Row("document_id", "string.pattern", delete_document(document_id="a/b.mdx"),
        delete_document(document_id="   ")),
    Row("document_id", "path.relative", delete_document(document_id="a/b.md"),
        delete_document(document_id="../../etc/passwd.md"), note="dot-dot segment"),
    *page_rows(list_documents, max_page_size=200),
    # session.proto
    *required_uuid_rows(get_session),
    *required_uuid_rows(delete_session),
    *page_rows(list_sessions, max_page_size=100),
]  # fmt: skip


@pytest.mark.parametrize("row", MATRIX, ids=lambda row: row.id)
def test_the_last_accepted_value_passes(row: Row) -> None:
    assert violations_of(row.valid) == []


@pytest.mark.parametrize("row", MATRIX, ids=lambda row: row.id)
def test_the_first_rejected_value_is_reported_at_its_field_with_its_rule(row: Row) -> None:
    assert violations_of(row.invalid) == sorted([(row.path, row.rule), *row.also])


# --- Values that are valid because a field is unset or empty ---------------------------

LEFT_OUT = [
    pytest.param(question(), "max_results", id="QuestionRequest.max_results unset"),
    pytest.param(question(), "confidence_threshold", id="QuestionRequest.confidence unset"),
    pytest.param(question(), "temperature", id="QuestionRequest.temperature unset"),
    pytest.param(question(), "max_tokens", id="QuestionRequest.max_tokens unset"),
    pytest.param(retrieve(), "max_results", id="RetrieveRequest.max_results unset"),
    pytest.param(retrieve(), "confidence_threshold", id="RetrieveRequest.confidence unset"),
]


@pytest.mark.parametrize(("message", "field"), LEFT_OUT)
def test_an_unset_optional_field_is_valid(message: Message, field: str) -> None:
    """Unset is not the same as zero: the server applies its default (zero is invalid)."""
    assert not message.HasField(field)
    assert violations_of(message) == []


EMPTY_IS_FINE = [
    pytest.param(question(session_id=""), id="QuestionRequest.session_id: new session"),
    pytest.param(question(request_id=""), id="QuestionRequest.request_id: server picks"),
    pytest.param(question(metadata={}), id="QuestionRequest.metadata: none"),
    pytest.param(question(filters=types_pb2.SearchFilters()), id="QuestionRequest.filters"),
    pytest.param(ingest_options(base_url=""), id="IngestOptions.base_url: no URLs"),
    pytest.param(ingest_document(content=""), id="Document.content: empty file"),
    pytest.param(corpus_pb2.IngestDocumentsRequest(options=corpus_pb2.IngestOptions()),
                 id="IngestDocumentsRequest: options only"),
    pytest.param(list_documents(), id="ListDocumentsRequest: first page, default size"),
    pytest.param(list_sessions(), id="ListSessionsRequest: first page, default size"),
    pytest.param(corpus_pb2.GetCorpusStatsRequest(), id="GetCorpusStatsRequest"),
]  # fmt: skip


@pytest.mark.parametrize("message", EMPTY_IS_FINE)
def test_an_empty_field_that_means_the_default_is_valid(message: Message) -> None:
    assert violations_of(message) == []


def test_every_violation_of_a_message_is_reported_at_once() -> None:
    message = question(
        query=" ",
        max_results=0,
        temperature=3.0,
        filters=types_pb2.SearchFilters(module="m" * 201),
        metadata={"bad key": "v"},
    )
    assert violations_of(message) == sorted(
        [
            ("query", "string.not_blank"),
            ("max_results", "int32.gte_lte"),
            ("temperature", "float.gte_lte"),
            ("filters.module", "string.max_len"),
            ('metadata["bad key"]', "string.pattern"),
        ]
    )


# --- Once gaps: what the documentation promises beyond ASCII and plain URIs ---------------

GAPS = [
    pytest.param(
        question(query="\u00a0\u3000"), ("query", "string.not_blank"),
        id="QuestionRequest.query: only Unicode spaces (NBSP, ideographic space)"),
    pytest.param(
        retrieve(query="\u2003\u000b"), ("query", "string.not_blank"),
        id="RetrieveRequest.query: only Unicode spaces (em space, vertical tab)"),
    pytest.param(
        ingest_options(base_url="mailto:docs@example.dev"), ("options.base_url", "base_url.http"),
        id="IngestOptions.base_url: not a site URL"),
]  # fmt: skip


@pytest.mark.parametrize(("message", "expected"), GAPS)
def test_documented_constraint_is_enforced(message: Message, expected: tuple[str, str]) -> None:
    assert expected in violations_of(message)


# --- Completeness: every rule in the protos has a row ----------------------------------


def _rules(field_rules: validate_pb2.FieldRules, path: str) -> list[tuple[str, str]]:
    """(path, rule id) of each rule in one field's FieldRules, as protovalidate names them."""
    found = [(path, rule.id) for rule in field_rules.cel]
    if field_rules.required:
        found.append((path, "required"))
    kind = field_rules.WhichOneof("type")
    if kind is None:
        return found
    typed = getattr(field_rules, kind)
    names = {descriptor.name for descriptor, _ in typed.ListFields()} - {"example"}
    for nested, part in (("keys", "key"), ("values", "value"), ("items", "*")):
        if nested in names:  # map keys and values, repeated items
            found += _rules(getattr(typed, nested), f"{path}[{part}]")
            names.discard(nested)
    lower, upper = names & {"gt", "gte"}, names & {"lt", "lte"}
    if lower and upper:  # a range is one rule: int32.gte_lte, float.gt_lt, ...
        found.append((path, f"{kind}.{lower.pop()}_{upper.pop()}"))
        names -= {"gt", "gte", "lt", "lte"}
    found += [(path, f"{kind}.{name}") for name in sorted(names)]
    return found


def declared_rules(message: Descriptor, prefix: str = "") -> list[tuple[str, str]]:
    """Every rule on a message and on the ragagent.v1 messages it contains."""
    found: list[tuple[str, str]] = []
    message_rules = message.GetOptions().Extensions[validate_pb2.message]
    found += [(prefix.rstrip("."), rule.id) for rule in message_rules.cel]
    found += [(prefix.rstrip("."), "message.oneof") for _ in message_rules.oneof]
    for field in message.fields:
        path = prefix + field.name
        found += _rules(field.GetOptions().Extensions[validate_pb2.field], path)
        nested = field.message_type
        if (
            nested is not None
            and not nested.GetOptions().map_entry
            and nested.full_name.startswith(f"{PACKAGE}.")
            and nested is not message
        ):
            found += declared_rules(nested, f"{path}.")
    return found


def _rule_path(row: Row) -> str:
    """``metadata["bad key"]`` -> ``metadata[key]``: rows name concrete keys, rules do not."""
    if "[" not in row.path:
        return row.path
    return row.path.split("[", 1)[0] + f"[{row.map_part or '*'}]"


def test_every_declared_rule_has_a_row() -> None:
    covered = {(type(row.valid).DESCRIPTOR.full_name, _rule_path(row), row.rule) for row in MATRIX}
    missing = [
        f"{message.name}: {path} {rule}"
        for message in request_messages()
        for path, rule in declared_rules(message)
        if (message.full_name, path, rule) not in covered
    ]
    assert not missing, "rules without a row in the matrix:\n" + "\n".join(missing)


def test_every_row_belongs_to_a_request_message() -> None:
    """A row for a message no RPC takes would specify nothing."""
    requests = {message.full_name for message in request_messages()}
    for row in MATRIX:
        assert type(row.valid).DESCRIPTOR.full_name in requests, row.id
        assert type(row.invalid) is type(row.valid), row.id


def test_the_matrix_reads_the_rules_it_expects() -> None:
    """Guards the completeness check itself: it must see nested and map-key rules."""
    rules = set(declared_rules(agent_pb2.QuestionRequest.DESCRIPTOR))
    assert ("filters.module", "string.max_len") in rules
    assert ("metadata[key]", "string.pattern") in rules
    assert ("metadata[value]", "string.max_len") in rules
    assert ("query", "string.not_blank") in rules
    assert ("max_results", "int32.gte_lte") in rules
    assert ("session_id", "string.uuid") in rules
