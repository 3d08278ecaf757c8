"""Framing of an mpiP report: header facts and the byte range of each ``@--- Title ---`` section.

The section headings are found with ``bytes.find``, so large tables are never split into Python
lines here: their rows stay a byte range for ``perfkit.io.mpip.tables``. Line numbers are counted
(``bytes.count``) only when one is needed, for a message; a section's rows as ``(line, text)``
pairs are made only when asked for (small sections, and large ones whose fast reading needs the
line of a bad row). Lines end at ``\n``, ``\r\n`` or ``\r`` (as editors and ``grep -n`` count them).

The file is read into memory, never mapped: a report truncated by another process while it is read
then ends early (refused as truncated, naming the line) instead of killing this process by SIGBUS.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from perfkit.errors import PerfkitFormatError
from perfkit.options import too_big

SUPPORTED_MAJOR = (2, 3)
#: Longest line read [B]: mpiP's lines (a command line, a call site's file path) are far shorter.
MAX_LINE = 65536

_HEADING = re.compile(r"^@--- (.*?)\s*-*\s*$")
_COUNTED = re.compile(r"^(.*?):\s*(\d+)$")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
_NOT_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_ASSIGNMENT = b"@ MPI Task Assignment"
Text = bytes
_ASSIGNMENTS = re.compile(rb"^@ MPI Task Assignment[ \t]*:[ \t]*([0-9]+)(?: ([^\n]*?))?[ \t]*$", re.MULTILINE)

# Section titles (without a trailing ": N") -> internal key.
TITLES = {
    "MPI Time (seconds)": "task",
    "Task Time Statistics (seconds)": "task_concise",
    "Callsites": "callsites",
    "Aggregate Time (top twenty, descending, milliseconds)": "agg_time",
    "Aggregate Sent Message Size (top twenty, descending, bytes)": "agg_sent",
    "Aggregate I/O Size (top twenty, descending, bytes)": "agg_io",
    "Aggregate RMA Origin Size (top twenty, descending, bytes)": "agg_rma",
    "Aggregate Collective Time (top twenty, descending)": "hist_coll",
    "Aggregate Point-To-Point Sent (top twenty, descending)": "hist_p2p",
    "Callsite Time statistics (all, milliseconds)": "cs_time",
    "Callsite Time statistics (all callsites, milliseconds)": "cs_time_concise",
    "Callsite Message Sent statistics (all, sent bytes)": "cs_sent",
    "Callsite Message Sent statistics (all callsites, sent bytes)": "cs_sent_concise",
    "Callsite I/O statistics (all, I/O bytes)": "cs_io",
    "Callsite I/O statistics (all callsites, bytes)": "cs_io_concise",
    "Callsite RMA statistics (all, origin bytes)": "cs_rma",
    "Callsite RMA Target statistics (all callsites, bytes)": "cs_rma_concise",
}


@dataclass
class Source:
    """The report's bytes: held while its sections are read, read again from the file once released
    (refused if the file changed meanwhile: ``stamp`` is its size and modification time when first read)."""

    path: Path
    data: Text | None = field(default=None, repr=False)
    stamp: tuple[int, int] = (0, 0)
    _anchor: tuple[int, int] = (0, 1)  # a byte offset and its line number

    def bytes(self) -> Text:
        """The (normalised) bytes of the report."""
        if self.data is not None:
            return self.data
        data, stamp = _read(self.path)
        if stamp != self.stamp:
            raise fail(self.path, None, f"the file changed while it was read ({self.stamp[0]:,} bytes, now "
                                        f"{stamp[0]:,}): read it again once it is complete")
        return _normalised(data)

    def line_at(self, offset: int) -> int:
        """Line number of the byte at ``offset`` (counted from the last one asked for when it is before)."""
        pos, line = self._anchor if offset >= self._anchor[0] else (0, 1)
        line += self.bytes()[pos:offset].count(b"\n")
        self._anchor = (offset, line)
        return line

    def release(self) -> None:
        """Stop holding the bytes (the rows of a section not yet split are then read again if asked for)."""
        self.data = None


@dataclass
class Section:
    """One ``@--- Title ---`` section (heading at byte ``offset``): its column header and its rows.

    ``start``..``stop`` of the report's bytes holds every line after the column header (the first
    line neither blank nor a rule, at ``header_at``) up to the next heading, less trailing blank
    and rule lines.
    """

    title: str
    offset: int
    declared: int | None
    source: Source
    start: int = 0
    stop: int = 0
    header_at: int = 0
    header_text: str | None = None

    @property
    def line(self) -> int:
        """Line number of the heading."""
        return self.source.line_at(self.offset)

    @property
    def header_line(self) -> int:
        """Line number of the column header (of the heading's next line without one)."""
        return self.source.line_at(self.header_at if self.header_text is not None else self.start)

    @cached_property
    def rows(self) -> list[tuple[int, str]]:
        """Non-blank, non-rule row lines as (line number, text)."""
        text = self.source.bytes()[self.start:self.stop].decode("utf-8", errors="replace").split("\n")
        first = self.source.line_at(self.start)
        return [(first + i, line) for i, line in enumerate(text) if line.strip().strip("-")]


@dataclass
class Report:
    """One mpiP report: its bytes, header facts, task assignment and sections by key."""

    path: Path
    source: Source
    header: dict[str, tuple[int, str]] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    sections: dict[str, Section] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def fail(report_or_path: Report | Path, line: int | None, message: str) -> PerfkitFormatError:
    """The format error for ``report_or_path`` at ``line``."""
    path = report_or_path.path if isinstance(report_or_path, Report) else report_or_path
    return PerfkitFormatError(path, line, message)


def scan(path: Path) -> Report:
    """Split the report into header facts and sections; check the frame (header, end marker)."""
    raw, stamp = _read_checked(path)
    data = _normalised(raw)
    _check_line_lengths(path, data)
    source = Source(path, data, stamp)
    found = _NOT_SPACE.search(data)
    begin = found.start() if found else len(data)
    if begin == len(data):
        raise fail(path, None, "the file is empty (expected an mpiP report starting with '@ mpiP')")
    first_end = _line_end(data, begin)
    first = data[begin:first_end].decode("utf-8", errors="replace").strip()
    if first != "@ mpiP":
        raise fail(path, source.line_at(begin), f"expected '@ mpiP' (an mpiP report), found {first[:60]!r}")
    report = Report(path, source)
    heading = _next_heading(data, first_end)
    _header_lines(report, data[first_end + 1:heading], source.line_at(first_end + 1))
    while heading < len(data):
        end = _line_end(data, heading)
        section = _open_section(report, heading, data[heading:end].decode("utf-8", errors="replace"))
        if section is None:
            _check_trailer(report, data[end + 1:], end + 1)
            _check_version(report)
            return report
        following = _next_heading(data, end)
        _frame_rows(section, end + 1, following)
        heading = following
    lines = data.count(b"\n") + (data[-1:] != b"\n")
    raise fail(path, lines, f"truncated at line {lines}: the file ends without the '@--- End of Report' heading")


def _check_line_lengths(path: Path, data: bytes, chunk: int = 1 << 24) -> None:
    """Refuse a line longer than ``MAX_LINE`` bytes, naming it (the newlines are found ``chunk`` bytes at a time)."""
    last = -1  # offset of the newline ending the previous line
    for start in range(0, len(data), chunk):
        view = np.frombuffer(data, np.uint8, count=min(chunk, len(data) - start), offset=start)
        ends = np.append(np.flatnonzero(view == 0x0A) + start, start + view.size)  # the chunk's end: a running line
        lengths = np.diff(ends, prepend=last) - 1
        k = int(np.argmax(lengths))
        if lengths[k] > MAX_LINE:
            begin = int(ends[k] - lengths[k])
            line = data.count(b"\n", 0, begin) + 1
            raise fail(path, line, f"line {line} is longer than {MAX_LINE:,} bytes (no mpiP report line is): "
                                   f"starts {data[begin:begin + 40].decode('utf-8', errors='replace')!r}")
        if ends.size > 1:
            last = int(ends[-2])


def _next_heading(data: Text, start: int) -> int:
    """Offset of the first ``@---`` line starting after ``start`` (``len(data)`` if none)."""
    at = data.find(b"@", start + 1)  # '@' is rare in tables: a one-byte find is a memchr over their rows
    while at > 0 and not (data[at - 1] == 0x0A and data[at:at + 4] == b"@---"):
        at = data.find(b"@", at + 1)
    return len(data) if at < 0 else at


def _read_checked(path: Path) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes and stamp, after checking its size against ``max_bytes``."""
    size = path.stat().st_size
    refusal = too_big(3.0 * size, "reading this mpiP report")  # bytes + parsed columns: under 3x the size
    if refusal:
        raise fail(path, None, refusal)
    return _read(path)


def _read(path: Path) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes (one read, a copy: never a mapping that another process could cut short) and its
    stamp, (size, modification time in ns) of the open file after the read."""
    with open(path, "rb") as fh:
        data = fh.read()
        info = os.fstat(fh.fileno())
    return data, (info.st_size, info.st_mtime_ns)


def _normalised(data: Text) -> Text:
    """``data`` with its ``\\r\\n`` and ``\\r`` line ends written ``\\n`` (as bytes then)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if data.find(b"\r") >= 0 else data


def _line_end(data: Text, start: int) -> int:
    end = data.find(b"\n", start)
    return len(data) if end < 0 else end


def _blank_or_rule(line: bytes) -> bool:
    return not line.strip().strip(b"-")


def _frame_rows(section: Section, start: int, stop: int) -> None:
    """Find the column header of a section's lines ``start``..``stop`` and the byte range of its rows."""
    data = section.source.bytes()
    while start < stop:
        end = min(_line_end(data, start), stop)
        text = data[start:end]
        if not _blank_or_rule(text):
            section.header_at, section.header_text = start, text.decode("utf-8", errors="replace")
            start = end + 1
            break
        start = end + 1
    while stop > start:  # trailing blank and rule lines
        begin = data.rfind(b"\n", start, stop - 1) + 1 or start
        if not _blank_or_rule(data[begin:stop]):
            break
        stop = begin
    section.start, section.stop = start, max(stop, start)


def _open_section(report: Report, offset: int, text: str) -> Section | None:
    """Register the section headed by ``text`` (at byte ``offset``); None for the End of Report heading."""
    match = _HEADING.match(text.rstrip())
    title = match.group(1).strip() if match else ""
    if title == "End of Report":
        return None
    counted = _COUNTED.match(title)
    base, declared = (counted.group(1).strip(), int(counted.group(2))) if counted else (title, None)
    key = TITLES.get(base)
    section = Section(title, offset, declared, report.source)
    if key is None:
        report.warnings.append(f"line {section.line}: section {title!r} is not read by this reader")
        return section
    if key in report.sections:
        raise fail(report, section.line, f"section {title!r} appears a second time (two reports in one file?)")
    report.sections[key] = section
    return section


def _header_lines(report: Report, block: bytes, first_line: int) -> None:
    """Record the ``@ Key : value`` lines of the report header (``block`` starts at ``first_line``).

    The task assignment lines (one per rank) are read by one regular expression when they are all
    well formed; otherwise line by line, naming the first bad one.
    """
    assigned = _ASSIGNMENTS.findall(block)
    if len(assigned) == block.count(b"\n" + _ASSIGNMENT) + block.startswith(_ASSIGNMENT):
        report.hosts.update((int(rank), host.decode("utf-8", errors="replace").strip()) for rank, host in assigned)
        lines = [(i, line) for i, line in enumerate(block.split(b"\n")) if not line.startswith(_ASSIGNMENT)]
    else:
        lines = list(enumerate(block.split(b"\n")))
    for i, raw in lines:
        lineno, text = first_line + i, raw.decode("utf-8", errors="replace")
        stripped = text.strip()
        if not stripped or stripped.strip("-") == "":
            continue
        if not text.startswith("@ ") or ":" not in text:
            raise fail(report, lineno, f"expected an '@ Key : value' header line, found {stripped[:60]!r}")
        key, _, value = text[2:].partition(":")
        key, value = key.strip(), value.strip()
        if key == "MPI Task Assignment":
            rank, _, host = value.partition(" ")
            if not rank.isdigit():
                raise fail(report, lineno, f"expected 'rank host' after MPI Task Assignment, found {value!r}")
            report.hosts[int(rank)] = host.strip()
        else:
            report.header[key] = (lineno, value)


def _check_trailer(report: Report, rest: bytes, offset: int) -> None:
    """Warn about text after the End of Report heading (``rest`` starts at byte ``offset``)."""
    lines = rest.decode("utf-8", errors="replace").split("\n")
    extra = [i for i, text in enumerate(lines) if text.strip().strip("-")]
    if extra:
        first = report.source.line_at(offset)
        report.warnings.append(f"lines {first + extra[0]}-{first + extra[-1]}: text after '@--- End of Report' "
                               "not read")


def _check_version(report: Report) -> None:
    if "Version" not in report.header:
        raise fail(report, 2, "expected an '@ Version : x.y.z' line in the report header")
    lineno, value = report.header["Version"]
    match = _VERSION.match(value)
    if not match:
        raise fail(report, lineno, f"expected a version number like 3.5.0, found {value!r}")
    if int(match.group(1)) not in SUPPORTED_MAJOR:
        raise fail(report, lineno, f"mpiP version {value} is not supported (expected 2.x or 3.x)")
