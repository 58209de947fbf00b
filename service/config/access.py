"""Document permissions: who may read unlabelled documents, and where callers' groups come
from (docs/security.md, "Document permissions")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AccessSettings(BaseModel):
    """Per-document read permissions (the groups of callers, and unlabelled documents)."""

    access_unlabelled: Literal["admin", "public"] = Field(
        "admin",
        description="Who may read a document that names no readers (no front matter "
        "`access` key, no IngestOptions.access) once authentication is on: `admin` (only "
        "admins: a document labelled by mistake stays hidden rather than leaks) or `public` "
        "(every authenticated caller: for a corpus meant for everyone). Without "
        "authentication every caller is trusted and reads every document.",
    )
    jwt_groups_claim: str = Field(
        "groups",
        min_length=1,
        description="Claim holding a JWT's groups (a list, or a space- or comma-separated "
        "string); documents are readable by the groups they name.",
    )
    trusted_groups_header: str | None = Field(
        None,
        description="Header holding the caller's groups (comma-separated), set by the same "
        "trusted mesh sidecar or gateway as TRUSTED_PRINCIPAL_HEADER; read only for "
        "callers that header names, never for API keys, JWTs or certificates.",
    )
    principal_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Groups of principals named by a client certificate or the trusted "
        'header, as JSON: {"spiffe://example.org/ns/robotics/sa/bot": ["robotics"]}. '
        "API keys and JWTs carry their own groups.",
    )
    certificate_ou_groups: bool = Field(
        False,
        description="Also take a client certificate's subject OU values (organizationalUnit"
        "Name) as its groups, for a CA whose OUs are group names.",
    )
