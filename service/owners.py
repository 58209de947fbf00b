"""Owner ids: whose a session is, named by how its caller authenticated.

Below both ``security`` (a principal's owner) and ``sessions`` (the owner migration), so
that each names owners the same way without importing the other. A name is compared whole:
sessions belong to it, so two names that differ only past some cut-off must never become
one owner. Names longer than :data:`MAX_NAME` (a SPIFFE id can be long) are replaced by
``sha256:<hex>`` of the whole name, which stays unique.
"""

from __future__ import annotations

import hashlib

MAX_NAME = 128

# The owner-id prefix of each way of authenticating (Principal.method).
OWNER_PREFIXES = {
    "api-key": "key",
    "jwt": "jwt",
    "certificate": "cert",
    "trusted-header": "header",
    "none": "anon",
}


def principal_name(raw: str) -> str:
    """``raw`` as an owner id: stripped, kept whole, hashed when longer than MAX_NAME."""
    name = raw.strip()
    if len(name) <= MAX_NAME and name.isprintable():
        return name
    return "sha256:" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def owner_id(method: str, name: str, scope: str = "") -> str:
    """``<prefix>:<name>`` (``jwt:<scope>|<name>``), hashed like a name when too long."""
    prefix = OWNER_PREFIXES.get(method, method)
    qualified = f"{scope}|{name}" if scope else name
    return f"{prefix}:{principal_name(qualified)}"
