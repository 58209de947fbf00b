"""Who is calling, as the chain's authentication layer established it.

The layer binds the caller's :class:`~service.security.principal.Principal` for the call
(a context variable: the handler runs in the task, and context, where the layer ran); the
servicers read it here and never look at headers themselves. Outside the chain nobody is
bound, which reads as the anonymous caller.
"""

from __future__ import annotations

from contextvars import ContextVar

from service.access import ReadAccess
from service.security.groups import read_access
from service.security.principal import Principal, Role

USER_ID_HEADER = "x-user-id"
ANONYMOUS = ""

_caller: ContextVar[Principal | None] = ContextVar("ragagent_caller", default=None)


def bind_caller(principal: Principal | None) -> None:
    """Makes ``principal`` the caller of the call being handled (the authentication layer)."""
    _caller.set(principal)


def current_caller() -> Principal | None:
    """The principal the interceptor chain bound to this call (None outside a call)."""
    return _caller.get()


def caller_identity() -> str:
    """The owner id of the caller's sessions (namespaced by how the caller authenticated:
    see Principal.owner); empty for an anonymous caller."""
    principal = _caller.get()
    return principal.owner if principal is not None else ANONYMOUS


def caller_access(*, unlabelled_public: bool) -> ReadAccess | None:
    """Which documents the caller may read (None: all); ``unlabelled_public`` is the
    operator's RAGAGENT_ACCESS_UNLABELLED=public."""
    return read_access(_caller.get(), unlabelled_public=unlabelled_public)


def sessions_visible() -> str | None:
    """Whose sessions the caller may read and delete by id: its own, or (None) anyone's for
    an admin. Listing and asking stay the caller's own either way."""
    principal = _caller.get()
    if principal is not None and principal.allows(Role.ADMIN):
        return None
    return caller_identity()
