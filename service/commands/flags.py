"""Settings with the command line's flags on top, and errors that name what the user typed.

A flag such as ``--address`` overrides a setting (``RAGAGENT_ADDRESS``). When its value is
wrong, the message must name the flag and the value given: the user never typed the
environment variable, and may not have it set at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from service.config import Settings, load_settings
from service.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Flag:
    """A command-line flag that overrides a setting; ``value`` None when not given."""

    name: str  # as typed, e.g. "--address"
    setting: str  # the Settings field it overrides, e.g. "address"
    value: object | None


def settings_with_flags(*flags: Flag, **fixed: object) -> Settings:
    """:func:`load_settings` with the given flags (and ``fixed`` values) overriding the
    environment; a bad flag value raises ConfigurationError naming the flag."""
    given = {flag.setting: flag.value for flag in flags if flag.value is not None}
    try:
        return Settings(**fixed, **given)  # type: ignore[arg-type]
    except ValidationError as exc:
        for error in exc.errors():
            field = error["loc"][0] if error["loc"] else None
            for flag in flags:
                if flag.value is not None and flag.setting == field:
                    reason = str(error["msg"]).removeprefix("Value error, ")
                    raise ConfigurationError(f"{flag.name} {flag.value!r}: {reason}") from None
    # No flag is at fault: the environment is, and load_settings names its variable.
    return load_settings(**fixed, **given)
