"""Every enum of ragagent.v1 follows the buf style: zero is ``<ENUM>_UNSPECIFIED``, and every
value carries the enum's name as its prefix (``RESPONSE_STATUS_SUCCESS``).

The enums are read from the descriptors of all generated files, so new enums (and new
files) are covered without touching this test.
"""

from __future__ import annotations

import re

import pytest
from google.protobuf.descriptor import EnumDescriptor

from tests.contract.descriptors import all_enums


def upper_snake(name: str) -> str:
    """``ToolCallStatus`` -> ``TOOL_CALL_STATUS``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).upper()


def test_the_helper_splits_words_as_buf_does() -> None:
    assert upper_snake("ResponseStatus") == "RESPONSE_STATUS"
    assert upper_snake("ToolCallStatus") == "TOOL_CALL_STATUS"
    assert upper_snake("HTTPMethod") == "HTTP_METHOD"
    assert upper_snake("Oauth2Scope") == "OAUTH2_SCOPE"


def test_the_package_has_enums() -> None:
    names = {enum.name for enum in all_enums()}
    assert {"ResponseStatus", "AnswerMode", "ToolCallStatus", "SessionStatus", "RunStatus"} <= names


ENUMS = all_enums()


@pytest.mark.parametrize("enum", ENUMS, ids=lambda enum: enum.full_name)
def test_zero_is_the_unspecified_value(enum: EnumDescriptor) -> None:
    zero = enum.values_by_number.get(0)
    assert zero is not None, f"{enum.full_name} has no value 0"
    assert zero.name == f"{upper_snake(enum.name)}_UNSPECIFIED"
    assert enum.values[0] is zero, f"{enum.full_name}: the UNSPECIFIED value must come first"


@pytest.mark.parametrize("enum", ENUMS, ids=lambda enum: enum.full_name)
def test_every_value_carries_the_enum_prefix(enum: EnumDescriptor) -> None:
    prefix = f"{upper_snake(enum.name)}_"
    unprefixed = [value.name for value in enum.values if not value.name.startswith(prefix)]
    assert not unprefixed, f"{enum.full_name}: values without the prefix {prefix}: {unprefixed}"


@pytest.mark.parametrize("enum", ENUMS, ids=lambda enum: enum.full_name)
def test_no_value_number_is_used_twice(enum: EnumDescriptor) -> None:
    """No aliases: a number that means two things cannot be logged or stored unambiguously."""
    numbers = [value.number for value in enum.values]
    assert len(numbers) == len(set(numbers))
