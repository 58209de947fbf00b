"""The contract as the generated code describes it: every file, message and enum of ragagent.v1.

Found by walking the generated package, so that a new .proto file is covered by every
contract test without touching them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import ragagent.v1
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor

PACKAGE = "ragagent.v1"


def package_files() -> list[FileDescriptor]:
    """The file descriptors of every generated ``*_pb2`` module of the package."""
    files = []
    for module in pkgutil.iter_modules(ragagent.v1.__path__):
        if module.name.endswith("_pb2"):
            files.append(importlib.import_module(f"{PACKAGE}.{module.name}").DESCRIPTOR)
    assert files, f"no generated modules found in {PACKAGE}"
    return files


def _nested_messages(message: Descriptor) -> Iterator[Descriptor]:
    yield message
    for nested in message.nested_types:
        if not nested.GetOptions().map_entry:
            yield from _nested_messages(nested)


def all_messages() -> list[Descriptor]:
    """Every message of the package, nested ones included (map entries excluded)."""
    return [
        nested
        for file in package_files()
        for message in file.message_types_by_name.values()
        for nested in _nested_messages(message)
    ]


def all_enums() -> list[EnumDescriptor]:
    """Every enum of the package: top-level and nested in messages."""
    enums = [enum for file in package_files() for enum in file.enum_types_by_name.values()]
    enums += [enum for message in all_messages() for enum in message.enum_types]
    return enums


def request_messages() -> list[Descriptor]:
    """The input type of every RPC of every service in the package, once each."""
    seen: dict[str, Descriptor] = {}
    for file in package_files():
        for service in file.services_by_name.values():
            for method in service.methods:
                seen.setdefault(method.input_type.full_name, method.input_type)
    return list(seen.values())
