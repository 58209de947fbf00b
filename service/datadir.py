"""The data folder (RAGAGENT_DATA_DIR) and what is made in it: private to the service's user.

It holds conversations and the corpus; other local users have no business reading them, so
every folder the service creates there is 0700 whatever the umask, and every file it creates
itself 0600. Folders and files that already exist keep the mode their operator gave them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Creates ``path`` and its missing parents 0700 (``mkdir -p`` would give the parents
    the umask's mode, and the data folder is usually such a parent)."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by a concurrent start meanwhile
            folder.mkdir(mode=DIR_MODE)
            # mkdir applies the umask, which may take even the owner's own bits away.
            folder.chmod(DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Creates ``path`` empty and 0600 (and its folders 0700) unless it exists already."""
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE))
    return path
