"""Every element of the contract has a leading doc comment: messages, fields, oneofs, enums,
enum values, services and RPCs of protos/ragagent/v1.

The comments are what clients read (in the .proto, in reflection-based tools, in generated
code), so an undocumented element is an incomplete contract. They are read from protoc's
source info: each ``SourceCodeInfo.Location`` names an element by its path of field numbers
in ``FileDescriptorProto`` (``[4, 0, 2, 1]`` is message 0, field 1).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
PROTO_DEPS = ROOT / ".cache" / "protos"
OWN_PROTOS = sorted((PROTOS / "ragagent" / "v1").glob("*.proto"))

# Field numbers in descriptor.proto that lead from a file to its elements.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM, MESSAGE_ONEOF = 2, 3, 4, 8
ENUM_VALUE = 2
SERVICE_METHOD = 2

Path_ = tuple[int, ...]


@pytest.fixture(scope="module")
def descriptor_set(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorSet:
    """Our .proto files compiled with their comments (imports are not included)."""
    if not PROTO_DEPS.is_dir():
        pytest.skip(f"{PROTO_DEPS.relative_to(ROOT)} is missing (buf/validate): run `make setup`")
    out = tmp_path_factory.mktemp("protoc") / "ragagent.binpb"
    command = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{PROTOS}", f"-I{PROTO_DEPS}",
        "--include_source_info", f"--descriptor_set_out={out}",
        *(str(proto.relative_to(PROTOS)) for proto in OWN_PROTOS),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"protoc failed:\n{result.stderr}"
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _message_elements(
    message: descriptor_pb2.DescriptorProto, path: Path_, name: str
) -> Iterator[tuple[str, Path_]]:
    yield f"message {name}", path
    for i, field in enumerate(message.field):
        yield f"field {name}.{field.name}", (*path, MESSAGE_FIELD, i)
    for i, oneof in enumerate(message.oneof_decl):
        if not any(
            f.HasField("oneof_index") and f.oneof_index == i and f.proto3_optional
            for f in message.field
        ):  # the synthetic oneof of a proto3 `optional` field has no source of its own
            yield f"oneof {name}.{oneof.name}", (*path, MESSAGE_ONEOF, i)
    for i, enum in enumerate(message.enum_type):
        yield from _enum_elements(enum, (*path, MESSAGE_ENUM, i), f"{name}.{enum.name}")
    for i, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:  # map<,> entries are synthesised by protoc
            yield from _message_elements(
                nested, (*path, MESSAGE_NESTED, i), f"{name}.{nested.name}"
            )


def _enum_elements(
    enum: descriptor_pb2.EnumDescriptorProto, path: Path_, name: str
) -> Iterator[tuple[str, Path_]]:
    yield f"enum {name}", path
    for i, value in enumerate(enum.value):
        yield f"enum value {name}.{value.name}", (*path, ENUM_VALUE, i)


def elements(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, Path_]]:
    """(description, source path) of every documentable element of one file."""
    for i, message in enumerate(file.message_type):
        yield from _message_elements(message, (FILE_MESSAGE, i), message.name)
    for i, enum in enumerate(file.enum_type):
        yield from _enum_elements(enum, (FILE_ENUM, i), enum.name)
    for i, service in enumerate(file.service):
        yield f"service {service.name}", (FILE_SERVICE, i)
        for j, method in enumerate(service.method):
            yield f"rpc {service.name}.{method.name}", (FILE_SERVICE, i, SERVICE_METHOD, j)


def undocumented(file: descriptor_pb2.FileDescriptorProto) -> list[str]:
    comments = {
        tuple(location.path): location.leading_comments
        for location in file.source_code_info.location
    }
    return [
        f"{file.name}: {what} has no leading comment"
        for what, path in elements(file)
        if not comments.get(path, "").strip()
    ]


def test_every_proto_file_is_compiled(descriptor_set: descriptor_pb2.FileDescriptorSet) -> None:
    assert OWN_PROTOS, "no .proto files found under protos/ragagent/v1"
    assert sorted(file.name for file in descriptor_set.file) == sorted(
        str(proto.relative_to(PROTOS)) for proto in OWN_PROTOS
    )


@pytest.mark.parametrize("proto", [p.name for p in OWN_PROTOS])
def test_every_element_has_a_leading_comment(
    descriptor_set: descriptor_pb2.FileDescriptorSet, proto: str
) -> None:
    (file,) = [f for f in descriptor_set.file if f.name == f"ragagent/v1/{proto}"]
    assert list(elements(file)), f"{proto} declares nothing"
    missing = undocumented(file)
    assert not missing, "undocumented elements:\n" + "\n".join(missing)


def test_a_missing_comment_is_found() -> None:
    """The check itself: an element without a comment is reported by name."""
    file = descriptor_pb2.FileDescriptorProto(name="x.proto")
    message = file.message_type.add(name="Thing")
    message.field.add(name="documented")
    message.field.add(name="bare")
    for path, comment in [((4, 0), " A thing.\n"), ((4, 0, 2, 0), " Yes.\n"), ((4, 0, 2, 1), "")]:
        file.source_code_info.location.add(path=path, leading_comments=comment)
    assert undocumented(file) == ["x.proto: field Thing.bare has no leading comment"]
