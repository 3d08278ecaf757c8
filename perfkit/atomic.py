"""Outputs written all or nothing: a temporary beside the target, renamed over it at the end.

A writer works on ``.NAME.perfkit-tmp-<host>-<pid>`` in the target's folder (same file system, so the
final rename is atomic): the target is at every moment either the old file or store, untouched,
or the complete new one. A file is put in place with ``os.replace``; a store (a folder) is
swapped with the old one by ``renameat2(RENAME_EXCHANGE)`` (Linux), or, where the file system
lacks it, the old one is first renamed to ``.NAME.perfkit-tmp-<host>-<pid>.old`` (``sweep`` puts it
back if the writer dies before the new one is in place). Temporaries of a writer that was killed
(written on this host, by a pid that no longer runs) are removed by ``sweep`` on the next run; those
of another host (a folder shared by the nodes of a cluster) are never touched, since whether their
writer still runs cannot be seen from here.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path

from perfkit.signals import deferred

TAG = ".perfkit-tmp-"
#: This host's name as temporaries carry it (characters other than letters, digits, '_', '.', '-' as '_').
HOST = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "localhost"
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.perfkit-tmp-(?:(?P<host>[A-Za-z0-9_.-]+)-)?(?P<pid>\d+)(?P<old>\.old)?$")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def temporary(target: str | PathLike, part: str = "") -> Path:
    """The temporary path of this process for ``target``: ``.NAME[.part].perfkit-tmp-<host>-<pid>`` beside it."""
    target = Path(target)
    name = f"{target.name}.{part}" if part else target.name
    return target.parent / f".{name}{TAG}{HOST}-{os.getpid()}"


def check_output(target: str | PathLike, *, overwrite: bool, inputs: Iterable[str | PathLike] = (),
                 store: bool = False, option: str = "--force") -> Path:
    """Refuse an output before any work: its folder must exist and be writable, the output must not
    be one of ``inputs`` (nor inside one), and an existing output is replaced only with ``overwrite``.

    ``store``: the output is a zarr store (a folder); an existing folder is replaced only if perfkit
    wrote it (it carries ``perfkit_version``), never a folder perfkit did not create.
    Raises ``FileNotFoundError`` (missing folder), ``FileExistsError`` or ``ValueError``.
    """
    target = Path(target)
    folder = target.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder: {folder} (to write {target.name} in)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write in the folder {folder} (to write {target.name} in)")
    for source in inputs:
        source = Path(source)
        if _same(source, target) or target.resolve() in source.resolve().parents:
            raise ValueError(f"{target} is also an input: write the output elsewhere")
    if not (target.exists() or target.is_symlink()):
        return target
    if target.is_dir() and not store:
        raise IsADirectoryError(f"{target} is a folder, not a file; not replaced")
    if store and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a zarr store; not replaced")
    if store and not _written_by_perfkit(target):
        raise FileExistsError(f"{target} is a folder perfkit did not write; not replaced")
    if not overwrite:
        raise FileExistsError(f"{target} exists; {option} replaces it")
    return target


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _written_by_perfkit(store: Path) -> bool:
    """A zarr store whose root attributes carry ``perfkit_version``."""
    try:
        return "perfkit_version" in json.loads((store / ".zattrs").read_text())
    except (OSError, ValueError):
        return False


def put_in_place(temp: Path, target: Path) -> None:
    """Move the complete ``temp`` to ``target`` atomically; an old ``target`` is removed afterwards."""
    if not temp.is_dir() or not target.is_dir():
        os.replace(temp, target)
        return
    if _exchange(temp, target):  # temp now holds the old store
        remove(temp)
        return
    old = temp.with_name(temp.name + ".old")
    os.rename(target, old)  # between the two renames sweep() restores it if this process dies
    os.rename(temp, target)
    remove(old)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where not supported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def remove(path: Path, settle: float = 0.0, limit: float = 5.0) -> None:
    """Remove a temporary file or folder; with ``settle``, again until it has stayed absent that long [s]
    (a write a signal cut short may still be completing on another thread and create it anew), for at
    most ``limit`` s."""
    start = absent = time.monotonic()
    while True:
        now = time.monotonic()
        if path.exists() or path.is_symlink():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            absent = now
            continue
        if now - absent >= settle or now - start >= limit:
            return
        time.sleep(0.05)


def left(folder: str | PathLike) -> list[Path]:
    """The temporaries of this process in ``folder`` (none once its writers are done or stopped)."""
    return sorted(Path(folder).glob(f".*{TAG}{HOST}-{os.getpid()}*"))


@contextmanager
def writing(target: str | PathLike, part: str = "") -> Iterator[Path]:
    """The temporary path to write ``target`` to; removed if the block fails (or is interrupted).

    The caller puts it in place with ``put_in_place`` once complete.
    """
    temp = temporary(target, part)
    remove(temp)
    try:
        yield temp
    except BaseException:
        remove(temp, settle=0.3)
        raise


def write_text(target: str | PathLike, text: str) -> Path:
    """Write ``text`` to ``target`` through a temporary file (flushed to disk) renamed over it."""
    target = Path(target)
    with writing(target) as temp:
        with open(temp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    return target


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stale(folder: str | PathLike) -> list[Path]:
    """The temporaries in ``folder`` left by perfkit writers of this host that are no longer running (killed);
    a name without a host (written before names carried one) counts as this host's."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if (match and match["host"] in (HOST, None) and int(match["pid"]) != os.getpid()
                and not _alive(int(match["pid"]))):
            found.append(Path(entry.path))
    return sorted(found)


def sweep(folder: str | PathLike, found: list[Path] | None = None) -> list[Path]:
    """Remove the ``stale`` temporaries of ``folder`` (or those ``found`` already); a store moved aside by a
    writer (``.old``) goes back to its name if nothing took its place. Returns them."""
    found = stale(folder) if found is None else found
    with deferred():  # a signal meanwhile stops the command once they are gone, not with one half removed
        for path in found:
            match = _TEMPORARY.match(path.name)
            target = path.parent / match["name"] if match else path
            if match and match["old"] and not (target.exists() or target.is_symlink()):
                os.rename(path, target)
            else:
                remove(path)
    return found
