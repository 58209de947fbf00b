"""What the session store keeps of a conversation's text, and how: in the clear, sealed with
AES-GCM, or not at all.

The free text of a turn (question, answer, error, tool-call arguments, results and errors)
comes from the caller or the model; RAGAGENT_SESSION_ENCRYPTION_KEY seals it before it
reaches the database, and RAGAGENT_RECORD_CONTENT=false keeps it out altogether. Ids,
statuses, timings, token counts and sources stay readable: the store queries them.

A sealed value is text, so that it fits the same columns on SQLite and PostgreSQL::

    enc:v1:<key id>:<base64(nonce (12 bytes) || ciphertext || tag (16 bytes))>

The associated data names the key, the turn and the field (``question``, ``answer``,
``error``, ``tool.3.result``...), so a value copied to another row or column fails to open
instead of reading as someone else's text. The turn's question is the same plaintext on the
turn row and in its user message, hence the same field name for both. A value without the
prefix was written before encryption was turned on and is returned as it is.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from service.errors import ConfigurationError, DatabaseUnavailable

PREFIX = "enc:v1:"
KEY_BYTES = 32  # AES-256
_NONCE_BYTES = 12  # 96 bits, random per value: 2^32 values per key stay far from a collision
_TAG_BYTES = 16
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SETTING = "RAGAGENT_SESSION_ENCRYPTION_KEY"


class Undecryptable(DatabaseUnavailable):
    """Stored text this server cannot open: its key id is not configured, or the value was
    altered or sealed for another row. UNAVAILABLE/DATABASE_UNAVAILABLE: during a key
    rollout another replica may hold the key; anything else is a configuration to fix."""


def new_key() -> str:
    """A fresh random key in the setting's encoding (standard base64 of 32 bytes)."""
    return base64.b64encode(AESGCM.generate_key(bit_length=KEY_BYTES * 8)).decode()


@dataclass(frozen=True)
class Cipher:
    """The configured keys: the first seals, every one of them opens."""

    keys: dict[str, bytes]
    active: str
    _aead: dict[str, AESGCM] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # An AESGCM object per key, made once: building one costs as much as sealing a turn.
        object.__setattr__(self, "_aead", {kid: AESGCM(key) for kid, key in self.keys.items()})

    @classmethod
    def parse(cls, setting: str) -> Cipher:
        """``kid:base64key[,kid:base64key...]``; errors name the entry, never the key."""
        keys: dict[str, bytes] = {}
        for position, entry in enumerate(setting.split(","), start=1):
            kid, sep, encoded = entry.strip().partition(":")
            if not sep or not KEY_ID.fullmatch(kid):
                raise ConfigurationError(
                    f"{_SETTING}: entry {position} must be KEY_ID:BASE64_KEY, the key id made "
                    "of letters, digits, '.', '_' or '-' (at most 64)"
                )
            if kid in keys:
                raise ConfigurationError(f"{_SETTING}: key id {kid!r} is listed twice")
            keys[kid] = _decode_key(kid, encoded.strip())
        return cls(keys, next(iter(keys)))

    def seal(self, text: str, context: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead[self.active].encrypt(
            nonce, text.encode(), _associated(self.active, context)
        )
        return f"{PREFIX}{self.active}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, value: str, context: str) -> str:
        kid, _, payload = value[len(PREFIX) :].partition(":")
        aead = self._aead.get(kid)
        if aead is None:
            raise Undecryptable(
                f"the session database holds text sealed with key id {kid!r}, which "
                f"{_SETTING} does not list; add that key (after the active one) to read it",
                metadata={"cause": "unknown encryption key id", "key_id": kid[:64]},
            )
        try:
            raw = base64.b64decode(payload, validate=True)
            if len(raw) < _NONCE_BYTES + _TAG_BYTES:
                raise ValueError("too short")  # noqa: TRY301 (one path for every defect)
            plain = aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _associated(kid, context))
            return plain.decode()
        except (InvalidTag, ValueError, binascii.Error):
            raise Undecryptable(
                f"sealed session text failed to open with key id {kid!r}: altered, moved "
                "from another row, or sealed with a different key under the same id",
                metadata={"cause": "encrypted text failed authentication", "key_id": kid[:64]},
            ) from None


@dataclass(frozen=True)
class Content:
    """The store's policy for a turn's text: record it or not, seal it or not."""

    record: bool = True
    cipher: Cipher | None = None

    @classmethod
    def from_key(cls, *, record: bool, key: str | None) -> Content:
        return cls(record=record, cipher=Cipher.parse(key) if key else None)

    def seal(self, text: str, turn_id: str, name: str) -> str:
        """What to store of ``text`` (field ``name`` of the turn)."""
        if not self.record:
            return ""
        if self.cipher is None or not text:
            return text  # an empty value tells nothing, and sealing it would cost a row's bytes
        return self.cipher.seal(text, _context(turn_id, name))

    def open(self, value: str, turn_id: str, name: str) -> str:
        """The text a stored value holds (plaintext written before encryption as it is)."""
        if not value.startswith(PREFIX):
            return value
        if self.cipher is None:
            raise Undecryptable(
                f"the session database holds encrypted text and {_SETTING} is not set",
                metadata={"cause": "no encryption key configured"},
            )
        return self.cipher.open(value, _context(turn_id, name))

    def seal_json(self, value: dict[str, Any] | None, turn_id: str, name: str) -> Any:
        """A JSON column's value: the object itself, or its sealed text (a JSON string)."""
        if not self.record:
            return None
        if self.cipher is None or value is None:
            return value
        return self.cipher.seal(json.dumps(value, separators=(",", ":")), _context(turn_id, name))

    def open_json(self, value: Any, turn_id: str, name: str) -> Any:
        if isinstance(value, str) and value.startswith(PREFIX):
            return json.loads(self.open(value, turn_id, name))
        return value


PLAIN = Content()


def _context(turn_id: str, name: str) -> str:
    return f"{turn_id}/{name}"


def _associated(kid: str, context: str) -> bytes:
    # The version and key id are in the header, read before the key is chosen: binding them
    # here keeps a rewritten header from passing.
    return f"ragagent.sessions/v1/{kid}/{context}".encode()


def _decode_key(kid: str, encoded: str) -> bytes:
    try:
        key = base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"{_SETTING}: the key of {kid!r} is not base64") from None
    if len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"{_SETTING}: the key of {kid!r} has {len(key)} bytes; AES-256 needs {KEY_BYTES} "
            "(make one with `ragagent sessions new-key`)"
        )
    return key
