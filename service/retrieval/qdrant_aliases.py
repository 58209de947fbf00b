"""A Qdrant server's collection behind an alias: the live name, and generations behind it.

Every reader and writer addresses the collection by ``RAGAGENT_QDRANT_COLLECTION``, which on
a server is an alias (Qdrant resolves it on every call). The collection behind it is a
*generation*, ``<alias>_g<N>``, and its document records ``<alias>_g<N>__documents`` sit
behind the alias ``<alias>__documents``. ``ragagent reindex`` builds generation N+1 beside
the live one and then moves both aliases in one request, which Qdrant applies atomically:
a search sees the old generation or the new one, never a half-built index, and no replica
restarts. The first start makes generation 1 and its aliases; the names are fixed, so
replicas starting at once make the same ones (see qdrant_create for the races).
"""

from __future__ import annotations

import re
from functools import partial

from qdrant_client import models

from service.domain import Deadline
from service.errors import StoreUnavailable
from service.retrieval.qdrant_calls import QdrantCalls
from service.retrieval.qdrant_create import setup_call

RECORDS_SUFFIX = "__documents"
NOT_FOUND = frozenset({404})
_GENERATION = re.compile(r"_g(\d+)$")


def generation(alias: str, number: int) -> str:
    return f"{alias}_g{number}"


def generation_number(alias: str, collection: str) -> int:
    """N of ``<alias>_g<N>``; 0 for a collection named otherwise (made by hand)."""
    found = _GENERATION.search(collection)
    if found is None or collection[: found.start()] != alias:
        return 0
    return int(found.group(1))


def records_of(collection: str) -> str:
    return collection + RECORDS_SUFFIX


async def aliases(calls: QdrantCalls, deadline: Deadline | None) -> dict[str, str]:
    """Every alias of the server -> the collection it names."""
    found = await calls.run(calls.client.get_aliases, deadline, "reading aliases")
    return {alias.alias_name: alias.collection_name for alias in found.aliases}


async def point(calls: QdrantCalls, alias: str, target: str, deadline: Deadline | None) -> None:
    """Points ``alias`` at ``target`` and ``<alias>__documents`` at its records, in one
    request (atomic in Qdrant). Another replica having done the same is success."""
    current = await aliases(calls, deadline)
    wanted = {alias: target, records_of(alias): records_of(target)}
    if all(current.get(name) == named for name, named in wanted.items()):
        return
    operations: list[models.AliasOperations] = []
    for name, named in wanted.items():
        if name in current:
            operations.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))
            )
        operations.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=named, alias_name=name)
            )
        )
    try:
        await setup_call(
            calls,
            partial(calls.client.update_collection_aliases, operations),
            deadline,
            "pointing the aliases",
            # A collection named here that another replica is still creating (this one got
            # its 409), or that a cluster's peer has not applied yet, is missing for a moment.
            also_transient=NOT_FOUND,
        )
    except StoreUnavailable:
        # Lost a race with another replica making the same aliases: fine if they are right.
        current = await aliases(calls, deadline)
        if any(current.get(name) != named for name, named in wanted.items()):
            raise
