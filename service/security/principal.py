"""The authenticated caller and the roles that decide what it may call.

A principal's name and owner id are made by :mod:`service.owners` (compared whole, hashed
when too long).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.owners import owner_id


class Role(StrEnum):
    ASK = "ask"  # AgentService and the caller's own sessions
    CORPUS_READ = "corpus:read"  # ListDocuments, GetCorpusStats
    CORPUS_WRITE = "corpus:write"  # IngestDocuments, DeleteDocument (and what read allows)
    ADMIN = "admin"  # everything


ROLE_NAMES = frozenset(role.value for role in Role)

# A role implies these too: writing the corpus is useless without seeing what it holds (an
# interrupted `ingest --address` asks GetCorpusStats), and admin is everything.
_IMPLIED: dict[Role, frozenset[Role]] = {
    Role.CORPUS_WRITE: frozenset({Role.CORPUS_READ}),
    Role.ADMIN: frozenset(Role),
}


def parse_roles(values: object) -> frozenset[Role]:
    """Known roles among ``values`` (a list, or one space/comma separated string); unknown
    names are dropped, not errors: a token may carry roles meant for other services."""
    if isinstance(values, str):
        items: list[object] = list(values.replace(",", " ").split())
    elif isinstance(values, list | tuple | set | frozenset):
        items = list(values)
    else:
        return frozenset()
    return frozenset(Role(item) for item in items if isinstance(item, str) and item in ROLE_NAMES)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, how that was established, and what it may do."""

    name: str
    roles: frozenset[Role]
    # "api-key", "jwt", "certificate", "trusted-header" or "none" (no authentication set up)
    method: str
    # The API key's id or the token's jti: which credential it was, never the secret.
    credential_id: str = ""
    # The groups it is in (service.security.groups): which documents it may read.
    groups: frozenset[str] = frozenset()
    # Where the name is unique: the JWT's issuer (two issuers may both have an "alice").
    scope: str = ""
    # The owner id an operator mapped this identity to (RAGAGENT_AUTH_PRINCIPAL_ALIASES).
    alias: str = ""

    @property
    def owner(self) -> str:
        """The owner id of the caller's sessions: the name within the space of how it was
        authenticated (``key:alice``, ``jwt:<issuer>|alice``, ``cert:<SAN>``,
        ``header:<value>``, ``anon:<x-user-id>``), so that a JWT subject, a key holder and
        a certificate that share a name are still different owners. Empty: anonymous."""
        if self.alias:
            return self.alias
        if not self.name:
            return ""
        return owner_id(self.method, self.name, self.scope)

    def allows(self, role: Role) -> bool:
        return any(role is held or role in _IMPLIED.get(held, ()) for held in self.roles)


# Without authentication configured (the embedded laptop default) every caller may do what a
# single user does; admin stays out so that even then one caller's sessions are not another's.
UNAUTHENTICATED_ROLES = frozenset({Role.ASK, Role.CORPUS_READ, Role.CORPUS_WRITE})
