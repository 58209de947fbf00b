"""The groups a caller is in, from its credential, and what they let it read.

Groups decide which documents a caller reads (service.access); roles decide which methods it
calls. A JWT carries them in a claim (RAGAGENT_JWT_GROUPS_CLAIM), an API key in its record
(``ragagent keys create --group``); a certificate or the trusted header's principal gets them
from RAGAGENT_PRINCIPAL_GROUPS, a certificate also from its subject's OU values when
RAGAGENT_CERTIFICATE_OU_GROUPS is on, and the trusted header's principal from the mesh's
groups header. A name that cannot be a label (empty, too long, control characters) is
dropped, like an unknown role: a token may carry groups meant for other services.
"""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import NameOID

from service.access import LabelError, ReadAccess, check_name
from service.security.principal import Principal, Role

MAX_GROUPS = 256  # more than this in one credential is not a group list but an attack


def parse_groups(values: object) -> frozenset[str]:
    """Group names among ``values``: a list, or one space/comma separated string."""
    if isinstance(values, str):
        items: list[object] = list(values.replace(",", " ").split())
    elif isinstance(values, list | tuple | set | frozenset):
        items = list(values)
    else:
        return frozenset()
    groups = set()
    for item in items[:MAX_GROUPS]:
        try:
            groups.add(check_name(item, "a group"))
        except LabelError:
            continue
    return frozenset(groups)


def header_groups(value: str | None) -> frozenset[str]:
    """The groups of a trusted groups header: comma-separated (names may hold spaces)."""
    if not value:
        return frozenset()
    return parse_groups([part for part in value.split(",") if part.strip()])


def certificate_ou_groups(pem: bytes) -> frozenset[str]:
    """The subject OU values of a client certificate (none when it does not parse)."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return frozenset()
    values = [
        a.value if isinstance(a.value, str) else a.value.decode(errors="replace")
        for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    ]
    return parse_groups(values)


def read_access(principal: Principal | None, *, unlabelled_public: bool) -> ReadAccess | None:
    """What ``principal`` may read; None: everything. An admin reads everything, and so
    does every caller of a server without authentication (``method == "none"``): there
    every caller is trusted, as on a laptop. Nobody bound (outside the interceptor chain:
    a wiring mistake) reads only what is readable by every caller, never everything."""
    if principal is None:
        return ReadAccess(frozenset(), unlabelled=unlabelled_public)
    if (principal.method == "none" and principal.allows(Role.ASK)) or principal.allows(Role.ADMIN):
        return None
    # Principals are named as their sessions are: by how they authenticated (key:alice).
    return ReadAccess.of(principal.owner, principal.groups, unlabelled=unlabelled_public)
