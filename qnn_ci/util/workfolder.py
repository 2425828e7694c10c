"""No symbolic link below the work folder carries qnn-ci's writes elsewhere.

qnn-ci writes only inside its work folder: ``<workdir>/<export>/<stage>/`` (cleared
before a stage runs), the lock files beside the stage folders, ``.memo/``,
``.shared/`` and ``.cache/``. A symbolic link on one of those paths (an export or
stage folder, a ``result.json``, a lock file), left by a restored cache archive or
by hand, would carry the writes, and the clearing, to wherever it points.
``refuse_links`` looks at each part of such a path below the work folder before
anything there is read or written, and refuses a link with one line (a
``UserError`` naming the link, where it points and what to do). A link that stays
inside the work folder is refused too: two exports or stages would share a folder,
and clearing one would clear the other. The work folder itself may be a link (the
shells resolve it once); only what is below it is looked at.

``open_new`` opens a file for writing without following a link in its place (the
link is replaced, its target left alone): for the files qnn-ci writes in a folder
it did not just make (a crash log, an SDK probe's log).
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path
from typing import BinaryIO

from qnn_ci.errors import UserError


def refuse_links(root: Path, *paths: Path) -> None:
    """Raise a ``UserError`` for the first symbolic link among the parts of each of
    ``paths`` below ``root`` (the work folder), or for a part that is not a folder
    where one must be. Parts that do not exist yet are fine: qnn-ci makes them."""
    for path in paths:
        here = root
        parts = path.relative_to(root).parts
        for i, part in enumerate(parts):
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except OSError:    # not there (yet): nothing below it is either
                break
            if stat.S_ISLNK(mode):
                raise UserError(_link_message(root, here), file=here)
            if i < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise UserError(f"not a folder, where qnn-ci keeps one in its work folder "
                                f"{root}; remove it (rm {shlex.quote(str(here))}) and run "
                                "again", file=here)


def _link_message(root: Path, link: Path) -> str:
    target = Path(os.path.realpath(link))
    real_root = Path(os.path.realpath(root))
    remove = f"remove the link (rm {shlex.quote(str(link))}) and run again"
    if target.is_relative_to(real_root):
        return (f"a symbolic link to {target}, inside the work folder: qnn-ci follows no "
                "link below its work folder (each export and stage keeps a folder of its "
                f"own); {remove}")
    return (f"a symbolic link to {target}, outside the work folder {root}: qnn-ci writes "
            f"only inside its work folder and does not follow it; {remove}")


def open_new(path: Path) -> BinaryIO:
    """``open(path, "wb")`` that never writes through a symbolic link: a link at
    ``path`` is removed first (its target is not touched)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP or not os.path.islink(path):
            raise
        os.unlink(path)
        fd = os.open(path, flags | os.O_EXCL, 0o666)
    return os.fdopen(fd, "wb")
