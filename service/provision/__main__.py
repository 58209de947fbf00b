"""``python -m service.provision protos|models``: one line out, on stdout or stderr."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from service.provision import (
    MODEL_ARTIFACTS,
    PROTO_ARTIFACTS,
    ProvisionError,
    cache_home,
    default_model_dir,
    provision,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.provision",
        description="Fetches the pinned third-party protos or the default embedding model.",
    )
    parser.add_argument("what", choices=["protos", "models"])
    parser.add_argument("--dest", type=Path, help="target directory (default: where make uses it)")
    parser.add_argument(
        "--download-cache", type=Path, default=cache_home() / "ragagent" / "downloads"
    )
    args = parser.parse_args(argv)
    if args.what == "protos":
        artifacts, dest = PROTO_ARTIFACTS, args.dest or REPO_ROOT / ".cache" / "protos"
    else:
        model_dir = os.environ.get("RAGAGENT_EMBEDDING_MODEL_DIR") or default_model_dir()
        artifacts, dest = MODEL_ARTIFACTS, args.dest or Path(model_dir)
    try:
        did = provision(artifacts, dest, args.download_cache)
    except (ProvisionError, OSError) as error:  # OSError: our own disk (space, permissions)
        # One line whatever the message holds (pip's output, paths).
        print(f"provision: {args.what}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"provision: {args.what}: interrupted", file=sys.stderr)
        return 130
    print(f"provision: {args.what} {'ready' if did else 'already up to date'} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
