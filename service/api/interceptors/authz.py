"""Authorization: whether the authenticated principal's roles allow the method it called.

Each method needs one role (:data:`REQUIRED`); a method missing from the table needs admin,
so an RPC added to the contract is closed until someone decides who may call it. A refusal
names the role that was missing and nothing about the resource the call named.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message
from ragagent.v1 import agent_pb2, corpus_pb2, session_pb2

from service.api.interceptors.authn import is_open
from service.api.interceptors.call import Call
from service.errors import PermissionDenied, Unauthenticated
from service.security.principal import Role


def _methods(module: object, service: str) -> list[str]:
    descriptor = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
    return [f"/{descriptor.full_name}/{m.name}" for m in descriptor.methods]


def _corpus(name: str) -> str:
    return f"/{corpus_pb2.DESCRIPTOR.services_by_name['CorpusService'].full_name}/{name}"


REQUIRED: dict[str, Role] = {
    **dict.fromkeys(_methods(agent_pb2, "AgentService"), Role.ASK),
    # Sessions are the caller's own (the store answers NOT_FOUND for anyone else's).
    **dict.fromkeys(_methods(session_pb2, "SessionService"), Role.ASK),
    _corpus("ListDocuments"): Role.CORPUS_READ,
    _corpus("GetCorpusStats"): Role.CORPUS_READ,
    _corpus("IngestDocuments"): Role.CORPUS_WRITE,
    _corpus("DeleteDocument"): Role.CORPUS_WRITE,
}


def required_role(method: str) -> Role:
    return REQUIRED.get(method, Role.ADMIN)


class Authorize:
    """The chain's authorization layer; runs after authentication."""

    def start(self, call: Call) -> None:
        # Health and reflection need no role: authentication alone decides whether they
        # need credentials at all (RAGAGENT_AUTH_PROTECT_OPEN_METHODS).
        if is_open(call.method):
            return
        principal = call.principal
        if principal is None:  # authentication did not run: a wiring mistake, fail closed
            raise Unauthenticated("the call was not authenticated")
        role = required_role(call.method)
        if not principal.allows(role):
            raise PermissionDenied(f"calling {call.method} needs the {role.value!r} role")

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        return None
