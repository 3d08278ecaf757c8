"""Compressed profiles (gzip, bzip2, xz), recognised by their magic bytes and read through a
decompressed temporary copy; text encodings the readers do not take (UTF-16, a byte-order mark)
named in the refusal.

Sites keep profiles compressed: ``report.mpiP.gz`` reads as ``report.mpiP``. The copy is written
in 1 MiB pieces into a temporary folder removed afterwards; it is refused once it grows past
``perfkit.set_options(max_bytes=...)``, so a small bomb never fills the disk or memory.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from perfkit.errors import PerfkitFormatError
from perfkit.options import max_bytes

#: magic bytes -> (name, file suffix, opener of the decompressed stream)
_MAGIC: dict[bytes, tuple[str, str, Callable[[Path], IO[bytes]]]] = {
    b"\x1f\x8b": ("gzip", ".gz", lambda p: gzip.open(p, "rb")),
    b"BZh": ("bzip2", ".bz2", lambda p: bz2.open(p, "rb")),
    b"\xfd7zXZ\x00": ("xz", ".xz", lambda p: lzma.open(p, "rb")),
}
#: What a decompressor raises on a corrupt or truncated stream.
_BROKEN = (EOFError, OSError, lzma.LZMAError, ValueError)
_PIECE = 1 << 20


def compression(head: bytes) -> str | None:
    """``"gzip"``, ``"bzip2"`` or ``"xz"`` when ``head`` (a file's first bytes) starts with its magic, else None."""
    return next((name for magic, (name, _, _) in _MAGIC.items() if head.startswith(magic)), None)


def encoding_refusal(head: bytes) -> str | None:
    """Why text starting with ``head`` cannot be read (UTF-16, a UTF-8 byte-order mark), else None."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text: convert it to UTF-8 (e.g. iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8)"
    if head.startswith(b"\xef\xbb\xbf"):
        return "UTF-8 text with a byte-order mark: remove its first 3 bytes (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)"
    return None


def _entry(head: bytes) -> tuple[str, str, Callable[[Path], IO[bytes]]]:
    return next(entry for magic, entry in _MAGIC.items() if head.startswith(magic))


def decompressed_head(path: Path, head: bytes, size: int) -> bytes:
    """The first ``size`` decompressed bytes of the compressed file ``path`` (``head``: its first bytes)."""
    name, _, opener = _entry(head)
    try:
        with opener(path) as fh:
            return fh.read(size)
    except _BROKEN as exc:
        raise PerfkitFormatError(path, None, f"{name} data that does not decompress: {exc}") from None


def plain_name(path: Path) -> str:
    """``path``'s name without its compression suffix (``r.mpiP.gz`` -> ``r.mpiP``)."""
    for _, suffix, _ in _MAGIC.values():
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[: -len(suffix)]
    return path.name


@contextmanager
def decompressed(path: Path, head: bytes) -> Iterator[Path]:
    """A decompressed temporary copy of ``path`` (removed when the block ends); a reader's
    ``PerfkitFormatError`` about the copy is raised about ``path``, saying it was decompressed."""
    name, _, opener = _entry(head)
    limit = max_bytes()
    with tempfile.TemporaryDirectory(prefix=".perfkit-decompressed-") as folder:
        plain = Path(folder) / plain_name(path)
        try:
            with opener(path) as source, open(plain, "wb") as target:
                written = 0
                while piece := source.read(_PIECE):
                    written += target.write(piece)
                    if written > limit:
                        raise PerfkitFormatError(path, None, f"decompresses to more than {limit / 2**20:,.0f} MiB, "
                                                             "the limit (raise it with perfkit.set_options"
                                                             "(max_bytes=...) or PERFKIT_MAX_BYTES)")
        except _BROKEN as exc:
            raise PerfkitFormatError(path, None, f"{name} data that does not decompress (corrupt or truncated "
                                                 f"file): {exc}") from None
        try:
            yield plain
        except PerfkitFormatError as exc:
            if exc.path != str(plain):
                raise
            raise PerfkitFormatError(path, exc.line, f"{exc.reason} (line of the {name}-decompressed text)",
                                     member=exc.member) from None
