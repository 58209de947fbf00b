"""Settings of how caller identities become session owners (docs/security.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class IdentitySettings(BaseModel):
    """Mapping two identities to one owner."""

    auth_principal_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Owner ids to treat as another, as a JSON object from owner id to owner "
        "id. Session owners are namespaced by how the caller authenticated: key:<name>, "
        "cert:<SAN>, header:<value>, anon:<x-user-id>, and for a JWT jwt:<issuer>, a vertical "
        "bar, <sub>. Without an alias the same name under two methods is two owners; mapping "
        "a JWT subject's owner id to key:alice makes it own (and read) API-key alice's "
        "sessions (docs/security.md).",
    )
