"""Settings of how caller identities become session owners (docs/security.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class IdentitySettings(BaseModel):
    """Mapping two identities to one owner."""

    auth_principal_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Owner ids to treat as another, as JSON, for example "
        '{"jwt:https://idp.example|alice": "key:alice"}: the JWT subject then owns (and '
        "reads) the sessions of API-key alice. Session owners are namespaced by how the "
        "caller authenticated (key:, jwt:<issuer>|, cert:, header:, anon:); without an "
        "alias the same name under two methods is two owners.",
    )
