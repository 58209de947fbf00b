"""``ragagent keys create|revoke|list``: the API keys of RAGAGENT_API_KEYS_FILE.

``create`` prints the new key once, alone on the last line of stdout (``KEY=$(ragagent keys
create ... | tail -n1)``); only its hash is stored. A running server picks up a change within
about a second, without a restart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from service.config import load_settings
from service.errors import ConfigurationError
from service.security.apikeys import create_key, read_records, revoke_key
from service.security.principal import Role


def register(commands: Any) -> None:
    keys = commands.add_parser("keys", help="create, revoke and list API keys")
    actions = keys.add_subparsers(dest="action", required=True)
    roles = ", ".join(role.value for role in Role)

    create = actions.add_parser("create", help="make a key; prints it once, on the last line")
    create.add_argument("--principal", required=True, help="who the key's calls come from")
    create.add_argument(
        "--role", action="append", required=True, help=f"a role of the key, repeatable: {roles}"
    )
    create.add_argument(
        "--group",
        action="append",
        default=[],
        help="a group of the key, repeatable: its calls read the documents granted to it "
        "(docs/security.md, Document permissions)",
    )
    _file_flag(create)
    create.set_defaults(run=run_create)

    revoke = actions.add_parser("revoke", help="refuse a key from now on")
    revoke.add_argument("key_id", metavar="KEY_ID", help="the id `keys list` shows")
    _file_flag(revoke)
    revoke.set_defaults(run=run_revoke)

    listing = actions.add_parser("list", help="the keys, without their secrets")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    _file_flag(listing)
    listing.set_defaults(run=run_list)


def _file_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", type=Path, help="the key file (RAGAGENT_API_KEYS_FILE)")


def _key_file(args: argparse.Namespace) -> Path:
    path: Path | None = args.file or load_settings().api_keys_file
    if path is None:
        raise ConfigurationError("name the key file with --file or RAGAGENT_API_KEYS_FILE")
    return path


async def run_create(args: argparse.Namespace) -> int:
    path = _key_file(args)
    try:
        record, key = create_key(path, args.principal, args.role, args.group)
    except ValueError as error:
        print(f"ragagent: {error}", file=sys.stderr)
        return 2
    groups = f"; groups {', '.join(record.groups)}" if record.groups else ""
    print(
        f"key {record.id} for {record.principal} ({', '.join(record.roles)}{groups}) "
        f"added to {path}"
    )
    print("it is shown this once; store it now:")
    print(key)
    return 0


async def run_revoke(args: argparse.Namespace) -> int:
    path = _key_file(args)
    try:
        record = revoke_key(path, args.key_id)
    except KeyError:
        print(f"ragagent: no key {args.key_id!r} in {path}", file=sys.stderr)
        return 1
    print(f"key {record.id} of {record.principal} revoked at {record.revoked}")
    return 0


async def run_list(args: argparse.Namespace) -> int:
    path = _key_file(args)
    try:
        records = read_records(path)
    except ValueError as error:
        print(f"ragagent: {error}", file=sys.stderr)
        return 1
    for r in records:
        if args.json:
            fields = {"id": r.id, "principal": r.principal, "roles": r.roles, "groups": r.groups}
            print(json.dumps({**fields, "created": r.created, "revoked": r.revoked}))
        else:
            state = f"revoked {r.revoked}" if r.revoked else "active"
            groups = f"  groups {','.join(r.groups)}" if r.groups else ""
            print(
                f"{r.id}  {r.principal}  {','.join(r.roles)}{groups}  created {r.created}  {state}"
            )
    return 0
