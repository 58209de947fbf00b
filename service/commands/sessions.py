"""``ragagent sessions new-key``: a key for RAGAGENT_SESSION_ENCRYPTION_KEY.

Prints one ``KEY_ID:BASE64_KEY`` entry, alone on stdout, ready to go first in the setting
(``RAGAGENT_SESSION_ENCRYPTION_KEY="$(ragagent sessions new-key --id 2026-11),$OLD"``). Nothing is
stored: the key is the operator's to keep in a secret store.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any


def register(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="keys that seal stored conversations")
    actions = sessions.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new-key", help="print a new KEY_ID:BASE64_KEY entry")
    new.add_argument(
        "--id",
        dest="key_id",
        help="the key id (letters, digits, '.', '_', '-'); default: today's date, "
        "which tells operators which key is newest",
    )
    new.set_defaults(run=run_new_key)


async def run_new_key(args: argparse.Namespace) -> int:
    # Imported here: the session store's package (SQLAlchemy) is 0.8 s of every start-up.
    from service.sessions.sealing import KEY_ID, new_key

    key_id = args.key_id or datetime.now(UTC).strftime("%Y%m%d")
    if not KEY_ID.fullmatch(key_id):
        print(
            "ragagent: --id takes letters, digits, '.', '_' and '-' (at most 64)", file=sys.stderr
        )
        return 2
    print(f"{key_id}:{new_key()}")
    return 0
