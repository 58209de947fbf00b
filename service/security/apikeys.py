"""API keys: a file of key hashes, each with a principal and roles, re-read when it changes.

A key reads ``rak_<id>_<secret>``: the id names the record (so a lookup is one dict access
and logs can say which key was used), the secret is 32 random bytes. The file keeps only
``sha256(id:secret)``: with 256 random bits a stolen file cannot be brute-forced, so a
slow or peppered hash would add key management and latency but no safety. Comparison is
constant-time all the same, so timing says nothing about how much of a hash matched.

The file is JSON lines (one record per key, revoked ones kept with their revocation time so
that ``keys list`` can show them), written whole to a temporary file of mode 0600 and renamed
over the old one, so the server never reads half a file. A lock file serialises writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from service.access import LabelError, check_name
from service.observability.logging import get_logger
from service.owners import principal_name
from service.security.groups import parse_groups
from service.security.principal import Principal, Role, parse_roles

log = get_logger("ragagent.security")

PREFIX = "rak"
_ID_BYTES = 6
_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    hash: str  # "sha256:<hex>" of "<id>:<secret>"
    principal: str
    roles: list[str]
    created: str
    revoked: str | None = None
    # Which documents the key's calls may read (service.access); absent in older files.
    groups: list[str] = field(default_factory=list)


def _digest(key_id: str, secret: str) -> str:
    return "sha256:" + hashlib.sha256(f"{key_id}:{secret}".encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key, else None."""
    prefix, _, rest = key.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != PREFIX or len(key_id) != 2 * _ID_BYTES or not secret:
        return None
    return key_id, secret


def looks_like_key(token: str) -> bool:
    return token.startswith(PREFIX + "_")


def read_records(path: Path) -> list[KeyRecord]:
    """Every record of the file (none when it does not exist); a bad line raises ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(KeyRecord(**json.loads(line)))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a key record ({error})") from None
    return records


def _write_records(path: Path, records: list[KeyRecord]) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(asdict(r), sort_keys=True) + "\n" for r in records)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_key(
    path: Path, principal: str, roles: list[str], groups: Sequence[str] = ()
) -> tuple[KeyRecord, str]:
    """Adds a key for ``principal`` with ``roles`` and ``groups``; returns its record and
    the key itself, which exists nowhere else from then on."""
    unknown = sorted(set(roles) - {r.value for r in Role})
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r} (roles: {', '.join(r for r in Role)})")
    try:
        names = sorted({check_name(group, "a group") for group in groups})
    except LabelError as error:
        raise ValueError(str(error)) from None
    if not principal.strip():
        raise ValueError("the principal must not be empty")
    with _locked(path):
        records = read_records(path)
        taken = {r.id for r in records}
        key_id = secrets.token_hex(_ID_BYTES)
        while key_id in taken:  # pragma: no cover - 48 random bits
            key_id = secrets.token_hex(_ID_BYTES)
        secret = secrets.token_urlsafe(_SECRET_BYTES)
        record = KeyRecord(
            id=key_id,
            hash=_digest(key_id, secret),
            principal=principal.strip(),
            roles=sorted(set(roles)),
            groups=names,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        _write_records(path, [*records, record])
    return record, f"{PREFIX}_{key_id}_{secret}"


def revoke_key(path: Path, key_id: str) -> KeyRecord:
    """Marks the key revoked; the server refuses it within about a second."""
    with _locked(path):
        records = read_records(path)
        for index, record in enumerate(records):
            if record.id == key_id:
                if record.revoked is not None:
                    return record
                revoked = replace(record, revoked=datetime.now(UTC).isoformat("T", "seconds"))
                records[index] = revoked
                _write_records(path, records)
                return revoked
    raise KeyError(key_id)


class KeyRing:
    """The keys of one file, as the server checks them; :meth:`watch` keeps them current."""

    def __init__(self, path: Path, *, poll_interval_s: float = 1.0) -> None:
        self.path = path
        self._poll = poll_interval_s
        self._keys: dict[str, KeyRecord] = {}
        self._seen: tuple[int, int, int] | None = None

    def refresh(self) -> bool:
        """Re-reads the file if it changed (blocking: run it off the event loop); True when
        the keys were replaced. A file that cannot be read keeps the keys as they were."""
        try:
            st = self.path.stat()
            seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            seen = (0, 0, 0)
        if seen == self._seen:
            return False
        try:
            records = read_records(self.path)
        except (OSError, ValueError) as error:
            log.warning("API key file not reloaded; the keys stay as they were", error=str(error))
            return False
        self._keys = {r.id: r for r in records if r.revoked is None}
        changed = self._seen is not None
        self._seen = seen
        if changed:
            log.info("API keys reloaded", path=str(self.path), active_keys=len(self._keys))
        return True

    async def watch(self) -> None:
        """Checks the file every poll interval until cancelled. On a thread of asyncio's
        own, not the runtime's bounded pool: a revocation must not wait behind a long
        embedding batch."""
        while True:
            await asyncio.sleep(self._poll)
            await asyncio.to_thread(self.refresh)

    def verify(self, key: str) -> Principal | None:
        """The principal of an active key, else None (unknown, revoked, malformed)."""
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        record = self._keys.get(key_id)
        expected = record.hash if record is not None else _digest("0" * 12, "")
        # Compared even for an unknown id, so that timing does not tell which ids exist.
        matches = hmac.compare_digest(_digest(key_id, secret).encode(), expected.encode())
        if record is None or not matches:
            return None
        return Principal(
            name=principal_name(record.principal),
            roles=parse_roles(record.roles),
            method="api-key",
            credential_id=record.id,
            groups=parse_groups(record.groups),
        )
