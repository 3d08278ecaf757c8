"""Framing of an mpiP report: header facts and the byte range of each ``@--- Title ---`` section.

One pass over the bytes finds the section headings (``bytes.find``) and counts the lines before
them (``bytes.count``), so large tables are never split into Python lines here: their rows stay a
byte range for ``perfkit.io.mpip_tables``. A section's rows as ``(line, text)`` pairs are made only
when asked for (small sections, and large ones whose fast reading needs the line of a bad row).
Line numbers are those of ``str.splitlines`` on the decoded text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from perfkit.errors import PerfkitFormatError
from perfkit.options import too_big

SUPPORTED_MAJOR = (2, 3)

_HEADING = re.compile(r"^@--- (.*?)\s*-*\s*$")
_COUNTED = re.compile(r"^(.*?):\s*(\d+)$")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
#: Line breaks of ``str.splitlines`` other than ``\n`` (UTF-8 encoded): files holding one are
#: rewritten with ``\n`` so that byte offsets and line numbers agree with the decoded text.
#: (Single bytes, each a ``memchr``: ``\x85``, ``\xa8``, ``\xa9`` end U+0085, U+2028, U+2029.)
_OTHER_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x85", b"\xa8", b"\xa9")

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
    """The report's bytes: held while its sections are read, re-read from the file once released."""

    path: Path
    data: bytes | None = field(default=None, repr=False)

    def bytes(self) -> bytes:
        """The (normalised) bytes of the report."""
        return _normalised(self.path.read_bytes()) if self.data is None else self.data

    def release(self) -> None:
        """Stop holding the bytes (the rows of a section not yet split are then read again if asked for)."""
        self.data = None


@dataclass
class Section:
    """One ``@--- Title ---`` section: its column header and the byte range of its rows.

    ``start``..``stop`` of the report's bytes holds every line after the column header up to the next
    heading, less trailing blank and rule lines; ``first_line`` is the line number at ``start``.
    """

    title: str
    line: int
    declared: int | None
    source: Source
    start: int = 0
    stop: int = 0
    first_line: int = 0
    header: tuple[int, str] | None = None

    @cached_property
    def rows(self) -> list[tuple[int, str]]:
        """Non-blank, non-rule row lines as (line number, text)."""
        text = self.source.bytes()[self.start:self.stop].decode("utf-8", errors="replace").splitlines()
        return [(self.first_line + i, line) for i, line in enumerate(text) if line.strip().strip("-")]


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
    data = _normalised(_read_framed(path))
    begin = len(data) - len(data.lstrip())
    if begin == len(data):
        raise fail(path, None, "the file is empty (expected an mpiP report starting with '@ mpiP')")
    line = data.count(b"\n", 0, begin) + 1
    first_end = _line_end(data, begin)
    first = data[begin:first_end].decode("utf-8", errors="replace").strip()
    if first != "@ mpiP":
        raise fail(path, line, f"expected '@ mpiP' (an mpiP report), found {first[:60]!r}")
    report = Report(path, Source(path, data))
    heading = data.find(b"\n@---", first_end) + 1 or len(data)
    _header_lines(report, data[first_end + 1:heading], line + 1)
    line += data.count(b"\n", begin, heading)
    while heading < len(data):
        end = _line_end(data, heading)
        section = _open_section(report, line, data[heading:end].decode("utf-8", errors="replace"))
        if section is None:
            _check_trailer(report, data[end + 1:], line + 1)
            _check_version(report)
            return report
        following = data.find(b"\n@---", end) + 1 or len(data)
        _frame_rows(section, end + 1, following, line + 1)
        line += data.count(b"\n", heading, following)
        heading = following
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    raise fail(path, lines, "file ends without the '@--- End of Report' heading: the report is truncated")


def _read_framed(path: Path) -> bytes:
    """The file's bytes, after checking its size against ``max_bytes`` and its end marker."""
    size = path.stat().st_size
    refusal = too_big(3.0 * size, "reading this mpiP report")  # bytes + parsed columns: under 3x the size
    if refusal:
        raise fail(path, None, refusal)
    with open(path, "rb") as fh:
        fh.seek(max(size - 65536, 0))
        tail = fh.read()
        if size > 65536 and b"@--- End of Report" not in tail:
            raise fail(path, None, "no '@--- End of Report' heading in the last 64 KiB: the report is truncated "
                                   "or followed by something else")
        fh.seek(0)
        return fh.read()


def _normalised(data: bytes) -> bytes:
    """``data`` with every line break of ``str.splitlines`` written ``\\n`` (unchanged if it has no other)."""
    if not any(brk in data for brk in _OTHER_BREAKS):
        return data
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()).encode()


def _line_end(data: bytes, start: int) -> int:
    end = data.find(b"\n", start)
    return len(data) if end < 0 else end


def _blank_or_rule(line: bytes) -> bool:
    return not line.strip().strip(b"-")


def _frame_rows(section: Section, start: int, stop: int, line: int) -> None:
    """Find the column header of a section's lines ``start``..``stop`` and the byte range of its rows."""
    data = section.source.bytes()
    while start < stop:
        end = min(_line_end(data, start), stop)
        text = data[start:end]
        if not _blank_or_rule(text):
            section.header = (line, text.decode("utf-8", errors="replace"))
            start, line = end + 1, line + 1
            break
        start, line = end + 1, line + 1
    while stop > start:  # trailing blank and rule lines
        begin = data.rfind(b"\n", start, stop - 1) + 1 or start
        if not _blank_or_rule(data[begin:stop]):
            break
        stop = begin
    section.start, section.stop, section.first_line = start, max(stop, start), line


def _open_section(report: Report, lineno: int, text: str) -> Section | None:
    """Register the section headed by ``text``; None for the End of Report heading."""
    match = _HEADING.match(text.rstrip())
    title = match.group(1).strip() if match else ""
    if title == "End of Report":
        return None
    counted = _COUNTED.match(title)
    base, declared = (counted.group(1).strip(), int(counted.group(2))) if counted else (title, None)
    key = TITLES.get(base)
    section = Section(title, lineno, declared, report.source)
    if key is None:
        report.warnings.append(f"line {lineno}: section {title!r} is not read by this reader")
        return section
    if key in report.sections:
        raise fail(report, lineno, f"section {title!r} appears a second time (two reports in one file?)")
    report.sections[key] = section
    return section


def _header_lines(report: Report, block: bytes, first_line: int) -> None:
    """Record the ``@ Key : value`` lines of the report header (``block`` starts at ``first_line``)."""
    for lineno, text in enumerate(block.decode("utf-8", errors="replace").splitlines(), start=first_line):
        if text.startswith("@ MPI Task Assignment"):
            key, _, value = text[2:].partition(":")
            if key.strip() == "MPI Task Assignment":
                rank, _, host = value.strip().partition(" ")
                if not rank.isdigit():
                    found = value.strip()
                    raise fail(report, lineno, f"expected 'rank host' after MPI Task Assignment, found {found!r}")
                report.hosts[int(rank)] = host.strip()
                continue
        stripped = text.strip()
        if not stripped or stripped.strip("-") == "":
            continue
        if not text.startswith("@ ") or ":" not in text:
            raise fail(report, lineno, f"expected an '@ Key : value' header line, found {stripped[:60]!r}")
        key, _, value = text[2:].partition(":")
        report.header[key.strip()] = (lineno, value.strip())


def _check_trailer(report: Report, rest: bytes, first_line: int) -> None:
    lines = rest.decode("utf-8", errors="replace").splitlines()
    extra = [first_line + i for i, text in enumerate(lines) if text.strip().strip("-")]
    if extra:
        report.warnings.append(f"lines {extra[0]}-{extra[-1]}: text after '@--- End of Report' not read")


def _check_version(report: Report) -> None:
    if "Version" not in report.header:
        raise fail(report, 2, "expected an '@ Version : x.y.z' line in the report header")
    lineno, value = report.header["Version"]
    match = _VERSION.match(value)
    if not match:
        raise fail(report, lineno, f"expected a version number like 3.5.0, found {value!r}")
    if int(match.group(1)) not in SUPPORTED_MAJOR:
        raise fail(report, lineno, f"mpiP version {value} is not supported (expected 2.x or 3.x)")
