"""protovalidate, with violations named the way clients write field paths."""

from __future__ import annotations

import protovalidate
from google.protobuf.message import Message

from service.errors import FieldViolation, InvalidArgument

_validator = protovalidate.Validator()


def field_path(violation: protovalidate.Violation) -> str:
    """Renders a violation's field path the way clients write it: ``filters.module``,
    ``metadata["key"]``, ``sources[2].url``."""
    parts: list[str] = []
    elements = violation.proto.field.elements if violation.proto.field else []
    for element in elements:
        name = element.field_name or str(element.field_number)
        subscript = ""
        which = element.subscript
        if which is not None:
            value = getattr(which, "value", which)
            subscript = f'["{value}"]' if isinstance(value, str) else f"[{value}]"
        parts.append(name + subscript)
    return ".".join(parts)


def validate(message: Message) -> None:
    """Raises InvalidArgument listing every violation of the message's protovalidate rules."""
    violations = _validator.collect_violations(message)
    if violations:
        raise InvalidArgument(
            [
                FieldViolation(
                    field=field_path(v),
                    description=v.proto.message or "",
                    reason=v.proto.rule_id or "",
                )
                for v in violations
            ]
        )
