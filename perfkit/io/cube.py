"""Score-P CUBE4 profiles (``.cubex``), read through pycubexr.

A ``.cubex`` file is a tar archive holding ``anchor.xml`` (metrics, regions, call tree, system
tree) and one ``<id>.index`` / ``<id>.data`` pair per stored metric. The call tree is flattened:
the exclusive values of every call-tree node whose region is an MPI function are summed per
function name; everything else (user code, OpenMP, measurement regions) becomes ``Compute``.
Locations (threads) are summed per process (MPI rank). See ``docs/formats/cube.md``.

:func:`callpaths` keeps the call tree instead: one row per call path (call-tree node), its exclusive
values summed per rank (:func:`read_call_tree` keeps them per rank, for statistics over any ranks).
"""

from __future__ import annotations

import re
import struct
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import numpy as np
import pandas as pd
import scipy.sparse
import xarray as xr
from defusedxml import ElementTree as SafeET
from defusedxml.common import DefusedXmlException
from pycubexr import CubexParser
from pycubexr.utils.exceptions import (
    CorruptIndexError,
    InvalidConversionInstructionError,
    MissingMetricError,
    UnsupportedMetricFormatError,
)

from perfkit.errors import PerfkitFormatError
from perfkit.model import COMPUTE, METRICS, RUN_NUMERIC, make_run
from perfkit.options import max_bytes, too_big

READER = "perfkit.io.cube"
ANCHOR = "anchor.xml"
EXPECTED = "a Score-P CUBE4 .cubex file (a tar archive with anchor.xml, <id>.index and <id>.data members)"

#: perfkit metric -> CUBE metric unique names that hold it (first present wins).
#: ``comms_send``/``comms_recv``/``bytes_rcvd`` are Scalasca names (assumed, no fixture).
CUBE_METRICS: dict[str, tuple[str, ...]] = {
    "time": ("time",),
    "calls": ("visits",),
    "bytes_sent": ("bytes_sent",),
    "calls_sent": ("comms_send",),
    "bytes_recv": ("bytes_received", "bytes_rcvd"),
    "calls_recv": ("comms_recv",),
}
#: No value a profiler stores reaches this (64-bit counters, times in s): larger ones are corrupt, and summing
#: them would overflow.
TOO_LARGE = 2.0**63
#: CUBE data types that are plain numbers (pycubexr returns a numpy array for them).
NUMERIC_DTYPES = re.compile(r"^(DOUBLE|FLOAT|U?INT(8|16|32|64)?|INTEGER|(UNSIGNED |SIGNED )?(SHORT )?INT(EGER)?|CHAR)$")
MPI_REGION = re.compile(r"^MPI_\w+$", re.IGNORECASE)
MEMBER = re.compile(rb"^(anchor\.xml|\d+\.(index|data))$")
ZDATA = b"ZCUBEX.DATA"
#: Memory of a parsed XML tree per byte of its text (anchor.xml may take 1/XML_FACTOR of max_bytes).
XML_FACTOR = 8
THREAD_TYPES = ("thread", "")
PROCESS_TYPES = ("process", "")

#: What pycubexr (and tarfile/zlib/XML underneath it) raises on a broken archive.
_READ_ERRORS = (
    tarfile.TarError, ParseError, DefusedXmlException, zlib.error, struct.error, EOFError, OSError,
    AssertionError, LookupError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError,
    CorruptIndexError, InvalidConversionInstructionError, MissingMetricError, UnsupportedMetricFormatError,
)


def sniff(path: Path, head: bytes) -> bool:
    """True if ``head`` starts with a tar header whose member is a CUBE4 part."""
    if len(head) < 512 or head[257:262] not in (b"ustar", b"\0\0\0\0\0"):
        return False
    name = head[:100].split(b"\0", 1)[0]
    return bool(MEMBER.match(name))


def read(path: str | PathLike, **run_metadata: Any) -> xr.Dataset:
    """Read one ``.cubex`` profile into a one-run canonical Dataset (time in s, bytes in B)."""
    path = Path(path)
    _check_file(path)
    anchor, raw = _read_anchor(path)
    system = _system_tree(path, anchor, raw)
    with _wrapped(path, "reading the profile with pycubexr"), _Parser(path) as parser:
        flat = _flatten_profile(path, parser, system)
    warnings = system.warnings + flat.warnings
    run = _run_metadata(path, system, flat, run_metadata, warnings)
    return make_run(
        flat.by_rank(system), ranks=system.ranks, functions=flat.functions, metrics=METRICS, run=run,
        warnings=warnings, reader=READER,
    )


class _Parser(CubexParser):
    """pycubexr's parser, also for call trees with several roots (Score-P writes one root per
    region entered outside ``main``, e.g. static initialisers); pycubexr asserts a single root.
    """

    def __enter__(self) -> _Parser:
        from pycubexr.parsers import tar_parser

        original = tar_parser.parse_anchor_xml
        tar_parser.parse_anchor_xml = _parse_anchor
        try:
            return super().__enter__()
        finally:
            tar_parser.parse_anchor_xml = original


def _parse_anchor(tree: Any) -> Any:
    """pycubexr's anchor parse result, without its single-root assertions."""
    from pycubexr.parsers import anchor_xml_parser, xml_parser_helper

    result = anchor_xml_parser.AnchorXMLParseResult(
        attrs=xml_parser_helper.parse_attrs(tree), metrics=xml_parser_helper.parse_metrics(tree),
        regions=xml_parser_helper.parse_regions(tree), cnodes=xml_parser_helper.parse_cnodes(tree),
        system_tree_nodes=xml_parser_helper.parse_system_tree_nodes(tree))
    anchor_xml_parser._metric_tree_enumerations(result)
    for cnode in result.all_cnodes.values():
        cnode.region = result.regions_by_id[cnode.callee_region_id]
    return result


# --- the archive -------------------------------------------------------------------------------


def _check_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if not path.is_file():
        raise PerfkitFormatError(path, None, f"is a directory, expected {EXPECTED}")
    if path.stat().st_size == 0:
        raise PerfkitFormatError(path, None, f"the file is empty, expected {EXPECTED}")


@contextmanager
def _wrapped(path: Path, doing: str, member: str | None = None) -> Iterator[None]:
    """Turn any exception pycubexr or the archive raises into a ``PerfkitFormatError``."""
    try:
        yield
    except PerfkitFormatError:
        raise
    except _READ_ERRORS as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise PerfkitFormatError(path, None, f"broken or truncated CUBE4 archive while {doing} ({detail[:300]})",
                                 member=member) from exc


_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def _open_tar(path: Path) -> tarfile.TarFile:
    """The archive opened as a plain tar (a ``.cubex`` is never compressed as a whole)."""
    try:
        return tarfile.open(path, mode="r:")
    except tarfile.ReadError:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        kind = next((k for m, k in _COMPRESSED.items() if magic.startswith(m)), None)
        if kind is not None:
            raise PerfkitFormatError(path, None, f"a {kind}-compressed file; expected {EXPECTED} "
                                                 "(a .cubex is a plain tar archive)") from None
        from pycubexr.utils.custom_tarinfo import TarInfoWithoutCheck

        try:
            return tarfile.open(path, mode="r:", tarinfo=TarInfoWithoutCheck)
        except (tarfile.ReadError, ValueError) as exc:
            reason = str(exc).splitlines()[-1].strip(" -") if str(exc).strip() else type(exc).__name__
            raise PerfkitFormatError(path, None, f"not a tar archive ({reason}); expected {EXPECTED}") from exc


def _check_members(path: Path, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """Regular members by name; each must lie inside the file, their total within ``max_bytes``."""
    size = path.stat().st_size
    members: dict[str, tarfile.TarInfo] = {}
    for info in tar.getmembers():
        if not info.isfile():
            continue
        if info.offset_data + info.size > size:
            raise PerfkitFormatError(path, None, f"member {info.name} declares {info.size:,} B but the archive "
                                                 "ends before that (truncated?)", member=info.name)
        members[info.name] = info
    refusal = too_big(sum(i.size for i in members.values()), "the members of this archive")
    if refusal:
        raise PerfkitFormatError(path, None, refusal)
    return members


def _inflate(path: Path, raw: bytes, member: str, wbits: int, limit: int | None = None, keep: bool = True) -> bytes:
    """zlib/gzip-inflate ``raw`` without ever holding more than ``limit`` [B] (default ``max_bytes``).

    With ``keep=False`` only the inflated size is measured (the output is dropped as it comes).
    """
    limit = max_bytes() if limit is None else limit
    out: list[bytes] = []
    total = 0
    inflater = zlib.decompressobj(wbits)
    view = memoryview(raw)
    try:
        for start in range(0, len(raw), 1 << 16):  # small input pieces: the unconsumed tail stays small
            data: bytes | memoryview = view[start: start + (1 << 16)]
            while data and not inflater.eof:
                chunk = inflater.decompress(data, 1 << 20)
                total += len(chunk)
                if total > limit:
                    raise PerfkitFormatError(path, None, f"inflates to more than {limit / 2**20:,.0f} MiB, the most "
                                                         "allowed for it (a decompression bomb? if genuine, raise "
                                                         "perfkit.set_options(max_bytes=...))", member=member)
                if keep:
                    out.append(chunk)
                data = inflater.unconsumed_tail
            if inflater.eof:
                break
    except zlib.error as exc:
        raise PerfkitFormatError(path, None, f"member {member} is not valid compressed data ({exc})",
                                 member=member) from exc
    if not inflater.eof:
        raise PerfkitFormatError(path, None, f"member {member}: compressed data ends early (truncated?)",
                                 member=member)
    return b"".join(out)


def _check_compressed_data(path: Path, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
    """A ``ZCUBEX.DATA`` member: its entry table fits the member and it inflates within ``max_bytes``."""
    fh = tar.extractfile(info)
    if fh.read(len(ZDATA)) != ZDATA:
        return
    head = fh.read(8)
    for order in "<>":
        count = struct.unpack(order + "q", head)[0] if len(head) == 8 else -1
        if 0 <= count and 24 * count <= info.size - len(ZDATA) - 8:
            break
    else:
        raise PerfkitFormatError(path, None, f"member {info.name}: the compressed-entry count does not fit "
                                             f"its {info.size:,} B", member=info.name)
    table = np.frombuffer(fh.read(24 * count), dtype=np.dtype(np.int64).newbyteorder(order)).reshape(-1, 3)
    sizes = table[:, 2]
    if np.any(sizes < 0) or int(sizes.sum()) > info.size:
        raise PerfkitFormatError(path, None, f"member {info.name}: compressed entries larger than the member",
                                 member=info.name)
    total = 0
    for size in sizes[sizes > 0]:  # measured, not kept: pycubexr inflates it once more
        total += len(_inflate(path, fh.read(int(size)), info.name, zlib.MAX_WBITS, max_bytes() - total, keep=False))


def _read_anchor(path: Path) -> tuple[Element, bytes]:
    """The parsed ``anchor.xml`` member (plain or gzip-compressed) and its text.

    Checks the whole archive first: plain tar, members inside the file and within ``max_bytes``,
    compressed members inflating within ``max_bytes``; only then does pycubexr see it.
    """
    with _wrapped(path, f"listing its members and reading {ANCHOR}"), _open_tar(path) as tar:
        members = _check_members(path, tar)
        if ANCHOR not in members:
            shown = ", ".join(list(members)[:5]) or "none"
            raise PerfkitFormatError(path, None, f"no member {ANCHOR} in the tar archive (members: {shown}); "
                                                 f"expected {EXPECTED}")
        if members[ANCHOR].size > max_bytes() // XML_FACTOR:
            raise PerfkitFormatError(path, None, too_big(members[ANCHOR].size * XML_FACTOR, "parsing this anchor.xml")
                                     or "", member=ANCHOR)
        raw = tar.extractfile(members[ANCHOR]).read()
        for name, info in members.items():
            if name.endswith(".data"):
                _check_compressed_data(path, tar, info)
    if not raw.lstrip().startswith(b"<"):  # measured first, so a bomb costs no memory
        limit = max_bytes() // XML_FACTOR
        _inflate(path, raw, ANCHOR, 16 + zlib.MAX_WBITS, limit, keep=False)
        raw = _inflate(path, raw, ANCHOR, 16 + zlib.MAX_WBITS, limit)
    try:
        root = SafeET.fromstring(raw)
    except ParseError as exc:
        line = exc.position[0] if exc.position else None
        raise PerfkitFormatError(path, line, f"not valid XML ({exc})", member=ANCHOR) from exc
    except (DefusedXmlException, ValueError, LookupError) as exc:
        raise PerfkitFormatError(path, None, f"refused XML ({type(exc).__name__}: {exc})", member=ANCHOR) from exc
    if root.tag != "cube" or root.find("system") is None or root.find("program") is None:
        raise PerfkitFormatError(path, None, "no <cube> with <program> and <system>", member=ANCHOR)
    return root, raw


def _anchor_line(raw: bytes, needle: str) -> int | None:
    """Line of ``anchor.xml`` where ``needle`` first occurs (for messages), else None."""
    at = raw.find(needle.encode("utf-8", "replace"))
    return raw.count(b"\n", 0, at) + 1 if at >= 0 else None


# --- the system tree: locations -> ranks -> nodes -----------------------------------------------


@dataclass
class SystemTree:
    """Who each location (thread) is: its process rank, node, and what the tree says of the machine."""

    location_rank: dict[int, int] = field(default_factory=dict)
    rank_node: dict[int, str] = field(default_factory=dict)
    rank_threads: dict[int, int] = field(default_factory=dict)
    has_nodes: bool = False
    system: str = ""
    warnings: list[str] = field(default_factory=list)
    raw: bytes = b""

    @property
    def ranks(self) -> list[int]:
        """Sorted MPI ranks found in the system tree."""
        return sorted(self.rank_threads)

    def rank_matrix(self, n_locations: int) -> scipy.sparse.csr_matrix:
        """Sparse one-hot (rank, location) matrix: ``M @ values.T`` sums locations per rank."""
        index = {r: i for i, r in enumerate(self.ranks)}
        locations = np.fromiter(self.location_rank, dtype=np.int64)
        ranks = np.array([index[r] for r in self.location_rank.values()], dtype=np.int64)
        ones = np.ones(len(locations))
        return scipy.sparse.csr_matrix((ones, (ranks, locations)), shape=(len(index), n_locations))


def _system_tree(path: Path, anchor: Element, raw: bytes) -> SystemTree:
    tree = SystemTree(raw=raw)
    skipped: dict[str, int] = {}
    for top in anchor.find("system").findall("systemtreenode"):
        _walk_system(path, top, None, tree, skipped)
    if not tree.location_rank:
        raise PerfkitFormatError(path, None, "the system tree has no process locations", member=ANCHOR)
    if skipped:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(skipped.items()))
        tree.warnings.append(f"locations that are not CPU threads of a process were left out ({kinds})")
    if max(tree.rank_threads.values()) > 1:
        tree.warnings.append("multi-threaded profile: per-rank values are sums over the threads of each process "
                             f"(up to {max(tree.rank_threads.values())} threads)")
    return tree


def _walk_system(path: Path, node: Element, node_name: str | None, tree: SystemTree, skipped: dict[str, int]) -> None:
    cls = (node.findtext("class") or "").strip()
    name = (node.findtext("name") or "").strip()
    if cls == "machine" and not tree.system:
        tree.system = name.removeprefix("machine ").strip()
    if cls == "node":
        tree.has_nodes = True
        node_name = name
    for group in node.findall("locationgroup"):
        _add_group(path, group, node_name, tree, skipped)
    for child in node.findall("systemtreenode"):
        _walk_system(path, child, node_name, tree, skipped)


def _add_group(path: Path, group: Element, node_name: str | None, tree: SystemTree, skipped: dict[str, int]) -> None:
    gtype = (group.findtext("type") or "").strip()
    locations = list(group.iter("location"))
    if gtype not in PROCESS_TYPES:
        skipped[gtype] = skipped.get(gtype, 0) + len(locations)
        return
    rank = _int(path, tree.raw, group.findtext("rank"), "locationgroup/rank", "<rank>")
    for loc in locations:
        ltype = (loc.findtext("type") or "").strip()
        if ltype not in THREAD_TYPES:
            skipped[ltype] = skipped.get(ltype, 0) + 1
            continue
        tree.location_rank[_int(path, tree.raw, loc.get("Id"), "location@Id", "<location ")] = rank
        tree.rank_threads[rank] = tree.rank_threads.get(rank, 0) + 1
    if node_name is not None:
        tree.rank_node[rank] = node_name


def _int(path: Path, raw: bytes, text: str | None, what: str, tag: str) -> int:
    """A rank or location id: an integer in 0 .. 2**31 - 1; errors name the line in ``anchor.xml``."""
    value = str(text).strip()
    if value.isascii() and value.isdigit() and len(value) < 11 and int(value) < 2**31:
        return int(value)
    line = _anchor_line(raw, f">{value}<" if tag == "<rank>" else f'"{value}"')
    raise PerfkitFormatError(path, line, f"{what} is {text!r}, expected an integer in 0..{2**31 - 1}",
                             member=ANCHOR)


# --- the call tree: flatten to MPI functions + Compute ------------------------------------------


@dataclass
class FlatProfile:
    """Per-location values of each metric, summed per function: (metric) -> (function, location)."""

    functions: list[str]
    values: dict[str, np.ndarray]
    elapsed_per_location: np.ndarray
    warnings: list[str] = field(default_factory=list)

    def by_rank(self, system: SystemTree) -> np.ndarray:
        """The (rank, function, metric) cube over ``METRICS``; NaN where not measured."""
        n_loc = self.elapsed_per_location.size
        to_rank = system.rank_matrix(n_loc)
        cube = np.full((len(system.ranks), len(self.functions), len(METRICS)), np.nan)
        for k, metric in enumerate(METRICS):
            if metric in self.values:
                cube[:, :, k] = to_rank @ self.values[metric].T
        return cube


def mpi_name(region_name: str) -> str | None:
    """``MPI_Xxx`` spelling of an MPI region name (``MPI_ALLREDUCE`` -> ``MPI_Allreduce``), else None."""
    name = region_name.strip()
    if not MPI_REGION.match(name):
        return None
    rest = name[4:]
    if rest.isupper():
        rest = rest.lower()
    return "MPI_" + rest[:1].upper() + rest[1:]


def _flatten_profile(path: Path, parser: Any, system: SystemTree) -> FlatProfile:
    cnodes = parser.all_cnodes()
    n_loc = len(parser.get_locations())
    if set(system.location_rank) - set(range(n_loc)):
        raise PerfkitFormatError(path, None, f"location ids are not 0..{n_loc - 1}", member=ANCHOR)
    labels = [_label(parser.get_region(c)) for c in cnodes]
    functions = [COMPUTE, *sorted({lab for lab in labels if lab != COMPUTE})]
    index = np.array([functions.index(lab) for lab in labels])
    metrics = {m.name: m for m in parser.all_metrics()}
    flat = FlatProfile(functions=functions, values={}, elapsed_per_location=np.zeros(n_loc))
    if "time" not in metrics:
        raise PerfkitFormatError(path, None, f"no 'time' metric (metrics: {sorted(metrics)})", member=ANCHOR)
    for ours, names in CUBE_METRICS.items():
        metric = next((metrics[n] for n in names if n in metrics), None)
        if metric is None:
            continue
        if not NUMERIC_DTYPES.match(str(metric.data_type).strip()):
            flat.warnings.append(f"metric {metric.name!r} has data type {metric.data_type}; left out")
            continue
        if metric.childs:
            flat.warnings.append(f"metric {metric.name!r} has sub-metrics; only its own values are read")
        try:
            stored = parser.get_metric_values(metric)
        except MissingMetricError:
            if ours == "time":
                raise PerfkitFormatError(path, None, f"no member {metric.id}.index/{metric.id}.data with the "
                                                     "values of metric 'time'") from None
            flat.warnings.append(f"metric {metric.name!r} is declared but the archive holds no values for it")
            continue
        _check_values(path, metric, np.asarray(stored.values, dtype=np.float64), len(stored.cnode_indices), ours)
        values = _by_function(stored, cnodes, index, len(functions), n_loc)
        if ours == "time":
            flat.elapsed_per_location = values.sum(axis=0)
        else:
            values[0] = np.nan  # Compute has no calls or bytes of its own
        flat.values[ours] = values
    absent = [m for m in METRICS if m not in flat.values]
    if absent:
        flat.warnings.append(f"the profile does not measure {', '.join(absent)} (NaN)")
    return flat


def _check_values(path: Path, metric: Any, values: np.ndarray, n_cnodes: int, ours: str) -> None:
    """Stored values must be finite, non-negative and below ``TOO_LARGE`` (no profiler measures a negative time,
    visit or byte; larger ones are corrupt and their sums would overflow)."""
    bad = ~((values >= 0) & (values < TOO_LARGE))  # NaN too
    if bad.any():
        k = int(np.argmax(bad))
        n_loc = max(values.size // max(n_cnodes, 1), 1)
        kind = {"time": "time", "bytes_sent": "byte count", "bytes_recv": "byte count"}.get(ours, "count")
        raise PerfkitFormatError(path, None, f"metric {metric.name!r}, call-tree entry {k // n_loc}, location "
                                             f"{k % n_loc}: expected a non-negative {kind}, found the stored value "
                                             f"{float(values[k])!r}", member=f"{metric.id}.data")


def _label(region: Any) -> str:
    """The function label of a region: its ``MPI_Xxx`` name, else ``Compute``."""
    if (region.role or "").strip() == "artificial":
        return COMPUTE
    return mpi_name(region.name or "") or COMPUTE


def _by_function(values: Any, cnodes: list[Any], index: np.ndarray, n_func: int, n_loc: int) -> np.ndarray:
    """Exclusive values of every call-tree node summed per function: shape (function, location)."""
    out = np.zeros((n_func, n_loc))
    inclusive = values.metric.metric_type == "INCLUSIVE"
    for cnode, f in zip(cnodes, index, strict=True):
        own = np.asarray(values.cnode_values(cnode), dtype=np.float64)
        if inclusive:
            own = own - sum((np.asarray(values.cnode_values(c), dtype=np.float64) for c in cnode.get_children()),
                            start=np.zeros(n_loc))
        out[f] += own
    return out


# --- run metadata ---------------------------------------------------------------------------------


def _run_metadata(
    path: Path, system: SystemTree, flat: FlatProfile, given: Mapping[str, Any], warnings: list[str]
) -> dict[str, Any]:
    """What the file states, then ``given`` where the file is silent (conflicts recorded)."""
    stated = _stated_metadata(system, flat)
    run = {"label": path.name.removesuffix(".cubex"), "source": str(path), **given}
    for name, value in stated.items():
        old = run.get(name)
        if old not in (None, "") and name in RUN_NUMERIC and not np.isclose(float(old), value):
            warnings.append(f"run metadata {name}={old!r} given, but the file states {value:g}; using the file")
        elif old not in (None, "") and name not in RUN_NUMERIC and str(old) != str(value):
            warnings.append(f"run metadata {name}={old!r} given, but the file states {value!r}; using the file")
        run[name] = value
    return run


def _stated_metadata(system: SystemTree, flat: FlatProfile) -> dict[str, Any]:
    stated: dict[str, Any] = {
        "format": "cube",
        "nprocs": float(len(system.ranks)),
        "threads": float(max(system.rank_threads.values())),
        "elapsed": float(flat.elapsed_per_location.max()),
    }
    if system.system:
        stated["system"] = system.system
    if system.has_nodes and len(system.rank_node) == len(system.ranks):
        per_node: dict[str, int] = {}
        for node in system.rank_node.values():
            per_node[node] = per_node.get(node, 0) + 1
        stated["nodes"] = float(len(per_node))
        if len(set(per_node.values())) == 1:
            stated["ppn"] = float(next(iter(per_node.values())))
    return stated


# --- the call tree kept: one row per call path ----------------------------------------------------

#: Separator of the region names of a call path, root first.
PATH_SEPARATOR = " > "


@dataclass
class CallTree:
    """The call paths of a profile, with each path's exclusive values per rank.

    ``paths``: one row per call-tree node, columns ``cnode`` (its id in the file), ``path`` (region names root
    first, joined by :data:`PATH_SEPARATOR`), ``function`` (``MPI_Xxx`` of the last region, else ``Compute``),
    ``region``, ``parent`` (the caller's region name, empty at a root) and ``depth`` (0 at a root).
    ``values[metric]``: shape (path, rank) over ``ranks``, for the metrics of ``METRICS`` the profile measures
    (time [s], calls, bytes [B]).
    """

    paths: pd.DataFrame
    values: dict[str, np.ndarray]
    ranks: np.ndarray

    def table(self, ranks: Any = None) -> pd.DataFrame:
        """One row per call path: :attr:`paths`, then each metric summed over ``ranks`` (default: every rank),
        and ``time_max`` / ``time_mean`` / ``time_min`` [s], the statistics of the path's time per rank over those
        ranks (a rank that never reaches the path counts 0), and ``rank_of_max``."""
        chosen = np.ones(self.ranks.size, bool) if ranks is None else np.isin(self.ranks, np.asarray(ranks))
        out = self.paths.copy()
        for metric, values in self.values.items():
            out[metric] = values[:, chosen].sum(axis=1)
        time = self.values["time"][:, chosen]
        empty = time.shape[1] == 0
        out["time_max"] = np.nan if empty else time.max(axis=1)
        out["time_mean"] = np.nan if empty else time.mean(axis=1)
        out["time_min"] = np.nan if empty else time.min(axis=1)
        out["rank_of_max"] = pd.array([pd.NA] * len(out), dtype="Int64") if empty else pd.array(
            self.ranks[chosen][time.argmax(axis=1)], dtype="Int64")
        return out


def read_call_tree(path: str | PathLike) -> CallTree:
    """The call tree of one ``.cubex`` profile with each call path's exclusive values per rank (see :class:`CallTree`).

    The same values the reader sums per function (:func:`read`), kept per call path: summed over the paths of a
    function, they are the reader's per-function values.
    """
    path = Path(path)
    _check_file(path)
    anchor, raw = _read_anchor(path)
    system = _system_tree(path, anchor, raw)
    with _wrapped(path, "reading the call tree with pycubexr"), _Parser(path) as parser:
        cnodes = parser.all_cnodes()
        n_loc = len(parser.get_locations())
        if set(system.location_rank) - set(range(n_loc)):
            raise PerfkitFormatError(path, None, f"location ids are not 0..{n_loc - 1}", member=ANCHOR)
        paths = _call_paths(cnodes)
        to_rank = system.rank_matrix(n_loc)
        metrics = {m.name: m for m in parser.all_metrics()}
        values: dict[str, np.ndarray] = {}
        for ours, names in CUBE_METRICS.items():
            metric = next((metrics[n] for n in names if n in metrics), None)
            if metric is None or not NUMERIC_DTYPES.match(str(metric.data_type).strip()):
                continue
            try:
                stored = parser.get_metric_values(metric)
            except MissingMetricError:
                continue
            _check_values(path, metric, np.asarray(stored.values, dtype=np.float64), len(stored.cnode_indices), ours)
            per_location = _exclusive(stored, cnodes, n_loc)
            values[ours] = np.asarray((to_rank @ per_location.T).T)
    if "time" not in values:
        raise PerfkitFormatError(path, None, f"no values of metric 'time' (metrics: {sorted(metrics)})", member=ANCHOR)
    return CallTree(paths=paths, values=values, ranks=np.asarray(system.ranks, dtype=np.int64))


def callpaths(path: str | PathLike, ranks: Any = None) -> pd.DataFrame:
    """Call-path table of one ``.cubex`` profile: one row per call path (``cnode`` id, ``path``, region names root
    first; ``function``, the MPI function at its end or ``Compute``; ``region``, ``parent``, ``depth``), its exclusive
    ``time`` [s], ``calls``, ``bytes_sent``, ``bytes_recv`` [B] (those measured) summed over ``ranks`` (default every
    rank), and its time per rank: ``time_max``, ``time_mean``, ``time_min`` [s] and ``rank_of_max``."""
    return read_call_tree(path).table(ranks)


def _call_paths(cnodes: list[Any]) -> pd.DataFrame:
    """Id, path (root first), function label, region, parent region and depth of each call-tree node, in ``cnodes``
    order."""
    position = {cnode.id: i for i, cnode in enumerate(cnodes)}
    regions = [str(cnode.region.name or "") if cnode.region is not None else "" for cnode in cnodes]
    parents = [position.get(cnode.parent.id, -1) if cnode.parent is not None else -1 for cnode in cnodes]
    paths: list[str | None] = [None] * len(cnodes)
    depths = [0] * len(cnodes)
    for start in range(len(cnodes)):  # parents come first in pycubexr's order; any other order is walked up
        chain = []
        i = start
        while i >= 0 and paths[i] is None:
            chain.append(i)
            i = parents[i]
        for j in reversed(chain):
            up = parents[j]
            paths[j] = regions[j] if up < 0 else f"{paths[up]}{PATH_SEPARATOR}{regions[j]}"
            depths[j] = 0 if up < 0 else depths[up] + 1
    return pd.DataFrame({
        "cnode": np.fromiter((cnode.id for cnode in cnodes), dtype=np.int64, count=len(cnodes)),
        "path": paths, "function": [_label(cnode.region) for cnode in cnodes], "region": regions,
        "parent": [regions[p] if p >= 0 else "" for p in parents], "depth": np.asarray(depths, dtype=np.int64)})


def _exclusive(stored: Any, cnodes: list[Any], n_loc: int) -> np.ndarray:
    """Exclusive values of each call-tree node per location, shape (node, location): the stored rows in place, and
    for an inclusive metric each node less its children."""
    position = {cnode.id: i for i, cnode in enumerate(cnodes)}
    out = np.zeros((len(cnodes), n_loc))
    order = sorted(stored.cnode_indices.items(), key=lambda item: item[1])
    rows = np.fromiter((position.get(cid, -1) for cid, _ in order), dtype=np.int64, count=len(order))
    block = np.asarray(stored.values, dtype=np.float64).reshape(len(order), n_loc)
    known = rows >= 0
    out[rows[known]] = block[known]
    if stored.metric.metric_type == "INCLUSIVE":
        parents = np.array([position.get(c.parent.id, -1) if c.parent is not None else -1 for c in cnodes],
                           dtype=np.int64)
        children = np.flatnonzero(parents >= 0)
        inclusive = out.copy()
        np.subtract.at(out, parents[children], inclusive[children])
    return out
