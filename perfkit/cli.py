"""The ``perfkit`` command line: one subcommand per capability, for batch use.

Subcommands are registered with ``@command(name, help)`` on a function that receives the
subparser to configure and returns the function that runs the command (it gets the parsed
arguments and returns an exit status). Heavy imports belong inside the run function so that
``perfkit --help`` stays fast.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

Runner = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Runner]

_COMMANDS: dict[str, tuple[str, Configure]] = {}


def command(name: str, help: str) -> Callable[[Configure], Configure]:
    """Register a subcommand: ``configure(parser) -> run(args) -> exit status``."""

    def register(configure: Configure) -> Configure:
        _COMMANDS[name] = (help, configure)
        return configure

    return register


class _Parser(argparse.ArgumentParser):
    """A usage error is one line, ``perfkit COMMAND: error: ...`` (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class UsageError(ValueError):
    """An argument the parser could not check (it needs the data read): a usage error, exit status 2."""


def _number(kind: Callable[[str], Any], low: float, *, above: bool = False,
            high: float = math.inf) -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` (int or float) at least ``low`` (above it when ``above``), at most
    ``high``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
        if high < math.inf and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low:g}..{high:g}, got {text}")
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {text}")
        return value

    return parse


#: An argparse type: a TCP port to serve on.
port = _number(int, 1, high=65535)
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def address(text: str) -> str:
    """An argparse type: an IPv4 or IPv6 address or a host name to listen on (checked, not resolved)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit():
        return text
    raise argparse.ArgumentTypeError(f"not an IP address (e.g. 127.0.0.1, ::1, 0.0.0.0) or a host name: {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="perfkit", description="MPI performance analysis and rank placement.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, configure) in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=configure(sub))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``perfkit`` console script; returns the exit status (130 after Ctrl-C, said in one line)."""
    from perfkit import signals

    signals.started()
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        signals.ignore_further()
        print("perfkit: stopped by SIGINT", file=sys.stderr)
        return signals.status("SIGINT")
    try:
        return args.run(args)
    except KeyboardInterrupt:
        signals.ignore_further()
        print(f"perfkit {args.command}: stopped by SIGINT", file=sys.stderr)
        return signals.status("SIGINT")
    except UsageError as exc:
        print(f"perfkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"perfkit {args.command}: error: {_out_of_memory(args, exc)}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"perfkit {args.command}: error: {f'no such file: {exc.filename}' if exc.filename else exc}"
              f"{_notes(exc)}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"perfkit {args.command}: error: {exc}{_notes(exc)}", file=sys.stderr)
        return 1


def _out_of_memory(args: argparse.Namespace, exc: MemoryError) -> str:
    """What to do when the machine's memory ran out: the file being read (``open_profile``'s ``path`` in the
    traceback), else the command's inputs."""
    import traceback

    reading = [frame.f_locals.get("path") for frame, _ in traceback.walk_tb(exc.__traceback__)
               if frame.f_code.co_name == "open_profile" and frame.f_code.co_filename.endswith("open.py")]
    inputs = [str(p) for name in ("paths", "a", "b", "matrix") for p in _listed(getattr(args, name, None))]
    what = f"reading {reading[-1]}" if reading else f"with {', '.join(inputs[:3])}{' ...' * (len(inputs) > 3)}"
    return (f"out of memory {what}: convert the files into a store ('perfkit convert FILES -o runs.zarr'), which "
            "is read lazily (in Python: perfkit.load(store, chunks=...)), or use a machine with more memory")


def _listed(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def _notes(exc: BaseException) -> str:
    """The notes added to ``exc`` (e.g. what became of the output), after '; ' on the same line."""
    return "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))


@command("info", "Read profiles and print what they hold: runs, ranks, functions, metrics, warnings.")
def _configure_info(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("paths", nargs="+", help="profile files or glob patterns (any supported format)")
    parser.add_argument("--format", default=None, help="force a format instead of sniffing it")
    _errors_option(parser)
    return _run_info


def _run_info(args: argparse.Namespace) -> int:
    import perfkit
    from perfkit.commands.info import describe

    ds = perfkit.open_runs(_expand(args.paths), format=args.format, progress=False, errors=_quiet(args.errors))
    _print_refused(ds)
    print(describe(ds), end="")
    return 0


@command("convert", "Read profiles into one store (.zarr or .nc), a run at a time, for lazy analysis.")
def _configure_convert(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("paths", nargs="+", help="profile files or glob patterns (any supported format)")
    parser.add_argument("-o", "--output", required=True, help="output store: *.zarr (lazy loading) or *.nc")
    parser.add_argument("--format", default=None, help="force a format instead of sniffing it")
    parser.add_argument("--metadata", help="JSON file mapping file name -> run metadata (nodes, ppn, ...)")
    parser.add_argument("--append", action="store_true", help="add the runs to an existing .zarr store")
    parser.add_argument("--force", action="store_true", help="replace an existing output (default: refuse it)")
    parser.add_argument("--workers", type=_number(int, 1), default=None,
                        help="local reader processes (default: one per core for more than 20 files; "
                             "the active dask client's workers when there is one)")
    _errors_option(parser)
    return _run_convert


def _run_convert(args: argparse.Namespace) -> int:
    from perfkit import signals

    before = _identity(args.output)
    return signals.run("convert", lambda: _convert(args), lambda: f"{_fate(args.output, before)}, "
                                                                  f"{_temporaries([args.output])}")


def _convert(args: argparse.Namespace) -> int:
    import warnings

    import perfkit

    metadata = _read_metadata(args.metadata) if args.metadata else None
    paths = _expand(args.paths)
    output = Path(args.output)
    _check_outputs([(output, output.suffix == ".zarr")], args.force, paths, append=args.append)
    with warnings.catch_warnings():  # the temporaries are swept and reported by _check_outputs
        warnings.filterwarnings("ignore", "removed .* temporary", perfkit.PerfkitWarning)
        output = perfkit.convert(paths, output, format=args.format, metadata=metadata, errors=_quiet(args.errors),
                                 append=args.append, workers=args.workers, overwrite=args.force)
    ds = perfkit.load(output, chunks={})
    _print_refused(ds)
    print(f"wrote {ds.sizes['run']} runs x {ds.sizes['rank']} ranks to {output}", file=sys.stderr)
    return 0


def _read_metadata(path: str) -> dict[str, dict[str, Any]]:
    """The ``--metadata`` file: a JSON object mapping file name -> {field: value}; a one-line
    ``ValueError`` naming the file and what is wrong otherwise."""
    import json

    from perfkit.errors import ContractError
    from perfkit.model import RUN_NUMERIC, run_coords

    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    kinds = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "true/false"}
    wrong = data if not isinstance(data, dict) else next((v for v in data.values() if not isinstance(v, dict)), {})
    if not isinstance(data, dict) or not isinstance(wrong, dict):
        where = "holds" if not isinstance(data, dict) else "maps a file name to"
        raise ValueError(f"{path}: --metadata must be a JSON object mapping file name -> {{field: value}}; it {where} "
                         f"a JSON {kinds.get(type(wrong), 'null')}")
    for name, fields in data.items():  # each entry checked now, before any file is read
        try:
            coords = run_coords(**fields)
        except ContractError as exc:
            raise ValueError(f"{path}: {name!r}: {exc}") from None
        wrong = next((f for f in RUN_NUMERIC if f in fields and not 0 <= coords[f] < math.inf), None)  # NaN: False
        if wrong is not None and fields[wrong] not in (None, ""):
            raise ValueError(f"{path}: {name!r}: run metadata {wrong}={fields[wrong]!r} must be a finite number >= 0")
    return data


def _check_outputs(outputs: Sequence[tuple[Path, bool]], force: bool, inputs: Sequence[Path | str], *,
                   append: bool = False) -> None:
    """Sweep the temporaries killed runs left in the outputs' folders, saying so, then refuse the outputs
    (path, is a zarr store) before any work (see ``perfkit.atomic.check_output``); ``append``: an existing
    output is added to, not replaced."""
    from perfkit import atomic

    paths = [path for path, _ in outputs]
    if len({path.resolve() for path in paths}) < len(paths):
        raise ValueError(f"the same file is given for two outputs: {', '.join(map(str, paths))}")
    for folder in dict.fromkeys(path.parent for path in paths):  # first: a store moved aside is back in place
        stale = atomic.stale(folder)
        if stale:  # said before they go, so that it is said even if this run is stopped while removing them
            print(f"perfkit: removing {len(stale)} temporary file(s) left by an earlier run that was killed: "
                  f"{', '.join(p.name for p in stale)}", file=sys.stderr)
            atomic.sweep(folder, stale)
    for path, store in outputs:
        atomic.check_output(path, overwrite=force or (append and path.exists()), inputs=inputs, store=store)


def _errors_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--errors", choices=("raise", "warn", "skip"), default="raise",
                        help="a file that cannot be read: stop (raise, default), or leave it out and list it "
                             "(warn, skip)")


def _quiet(errors: str) -> str:
    """The refused files are printed by the command, not warned about a second time."""
    return "skip" if errors == "warn" else errors


def _print_refused(ds: Any) -> None:
    from perfkit.io.open import refused_files

    refused = refused_files(ds)
    for entry in refused:
        print(f"refused: {entry['error']}", file=sys.stderr)
    if refused:
        print(f"{len(refused)} file(s) could not be read and were left out", file=sys.stderr)


def _expand(patterns: Sequence[str]) -> list[Path]:
    from perfkit.io.open import expand_paths

    return [path for pattern in patterns for path in expand_paths(pattern)]


def read_traffic_matrix(path: str | Path, run: str | None = None) -> Any:
    """The traffic to place: a profile's ``traffic`` (MPInside with matrices, IPM; read with
    ``perfkit.open_profile``), one run of a store ``perfkit convert`` wrote (``run``: its label; needed
    when the store holds several; read lazily), or bytes sender x receiver from a matrix file
    ``perfkit.open_matrix`` reads (CSV, npy/npz, MatrixMarket). ``ValueError`` saying why when the
    file holds no traffic or no such run."""
    import numpy as np

    from perfkit.errors import PerfkitFormatError
    from perfkit.io.matrix import open_matrix
    from perfkit.io.open import open_profile
    from perfkit.io.registry import sniff_format

    if Path(path).suffix in (".zarr", ".nc"):
        from perfkit.commands.place import store_run

        return store_run(path, run)
    if run is not None:
        raise ValueError(f"--run {run}: {path} holds one run; --run chooses a run of a store (*.zarr, *.nc)")
    try:
        fmt = sniff_format(path)
    except PerfkitFormatError as not_profile:
        try:
            return open_matrix(path).sel(quantity="bytes")
        except ValueError as not_matrix:
            raise ValueError(f"{path}: neither a profile with traffic ({not_profile.reason}) "
                             f"nor a traffic matrix ({not_matrix})") from not_matrix
    ds = open_profile(path, format=fmt)
    traffic = ds.get("traffic")
    no_traffic = {
        "mpip": "this mpiP report has no rank-to-rank traffic (mpiP totals calls per call site, not per partner)",
        "mpinside": "this MPInside profile has no rank-to-rank traffic (it was written without transfer matrices; "
                    "'perfkit collect --matrices' writes them)",
        "ipm": "this IPM log has no rank-to-rank traffic (no per-partner entries)",
        "cube": "this CUBE profile has no rank-to-rank traffic",
    }
    measured = None if traffic is None else traffic.sel(quantity="bytes").data  # numpy or sparse.COO
    if measured is None or (isinstance(measured, np.ndarray) and np.isnan(measured).all()):
        raise ValueError(f"{path}: {no_traffic.get(fmt, f'this {fmt} profile has no rank-to-rank traffic')}; "
                         "place needs MPInside with transfer matrices, an IPM log, or a matrix file "
                         "(.csv / .txt / .npy / .npz / .mtx)")
    return ds


@command("place", "Profile-guided rank placement: write a launch file for a profile's rank-to-rank traffic.")
def _configure_place(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.commands.place import strategies_epilog
    from perfkit.placement.launch import FORMATS
    from perfkit.placement.strategies import STRATEGIES

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = strategies_epilog()
    parser.add_argument("matrix", help="a profile with rank-to-rank traffic (MPInside with matrices, IPM), a store "
                                       "'perfkit convert' wrote (*.zarr, *.nc; --run chooses the run) or a "
                                       "traffic matrix, sender x receiver bytes (.csv / .txt / .npy / .npz / .mtx)")
    parser.add_argument("--run", dest="store_run", metavar="LABEL", default=None,
                        help="the run of a store to place (default: its only run; without it a store of several "
                             "runs is refused, naming them)")
    parser.add_argument("--nodes", type=_number(int, 1), required=True, help="number of nodes")
    parser.add_argument("--ppn", type=_number(int, 1), required=True, help="cores (ranks) per node")
    parser.add_argument("--sockets", type=_number(int, 1), default=1, help="sockets per node (default 1)")
    parser.add_argument("--switch-size", type=_number(int, 1), default=None,
                        help="nodes per leaf switch (default: one switch)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="scotch",
                        help="how ranks are put on cores (default scotch; each explained below)")
    parser.add_argument("--format", choices=FORMATS, default="rankfile", help="launch file format")
    parser.add_argument("--hosts", help="file with one host name per line (default node000, node001, ...)")
    parser.add_argument("--seed", type=_number(int, 0), default=0,
                        help="Scotch random seed (same seed, same placement)")
    parser.add_argument("--balance", type=_number(float, 0), default=0.05,
                        help="Scotch load imbalance tolerance (default 0.05)")
    parser.add_argument("--timeout", type=_number(float, 0, above=True), default=300.0, help="Scotch time limit [s]")
    parser.add_argument("-o", "--output", help="launch file to write (default: standard output)")
    parser.add_argument("--force", action="store_true", help="replace existing output files (default: refuse them)")
    parser.add_argument("--prediction", metavar="FILE",
                        help="write JSON: inter-node bytes and elapsed time [s] before and after (with an interval), "
                             "the network assumed and where each number came from (needs a profile)")
    parser.add_argument("--bandwidth", metavar="RATE", default=None,
                        help="each node's link rate, for the time prediction (e.g. 200mbit, 100gbit; "
                             "default: unknown, a wider interval)")
    parser.add_argument("--uplink", metavar="RATE", default=None, help="each leaf switch's uplink rate (default: "
                                                                        "--bandwidth)")
    parser.add_argument("--latency", metavar="L", default="0", help="latency between nodes (e.g. 2us; default 0)")
    return _run_place


def _run_place(args: argparse.Namespace) -> int:
    from perfkit import signals

    outputs = [path for path in (args.output, args.prediction) if path]
    before = [_identity(path) for path in outputs]
    fates = lambda: ", ".join(_fate(path, old) for path, old in zip(outputs, before)) or "nothing written"  # noqa: E731
    return signals.run("place", lambda: _place(args), lambda: f"{fates()}, {_temporaries(outputs)}")


def _temporaries(outputs: Sequence[str | Path]) -> str:
    """Whether this run's temporaries beside ``outputs`` are gone, as said when it is stopped."""
    from perfkit import atomic

    left = [path for folder in {Path(p).parent for p in outputs} for path in atomic.left(folder)]
    if not left:
        return "temporary files removed"
    return f"{len(left)} temporary file(s) left, which the next run removes: {', '.join(p.name for p in left)}"


def _identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None if absent: an output put in place by a rename gets a new one."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _fate(path: str | Path, before: tuple[int, int] | None) -> str:
    """What a stopped command did to the output ``path`` whose identity was ``before``."""
    if _identity(path) == before:
        return f"{path} {'left as it was' if before is not None else 'not written'}"
    return f"{path} written completely"


def _place(args: argparse.Namespace) -> int:
    outputs = [Path(path) for path in (args.output, args.prediction) if path]
    inputs = [path for path in (args.matrix, args.hosts) if path]
    missing = next((path for path in inputs if not Path(path).exists()), None)
    if missing is not None:
        raise FileNotFoundError(2, "No such file or directory", missing)
    _check_outputs([(path, False) for path in outputs], args.force, inputs)
    before = [_identity(path) for path in outputs]
    try:
        return _place_and_write(args)
    except Exception as exc:  # say what became of each output, on the error's line
        for path, old in zip(outputs, before):
            exc.add_note(_fate(path, old))
        raise


def _place_and_write(args: argparse.Namespace) -> int:
    from perfkit import atomic
    from perfkit.placement.launch import read_hosts
    from perfkit.placement.strategies import place
    from perfkit.placement.topology import Topology

    described = {}
    if args.bandwidth is not None:  # the described links replace the default rates of the cost table
        from perfkit.placement.network import parse_rate, parse_time

        link = parse_rate(args.bandwidth) / 8
        uplink = parse_rate(args.uplink) / 8 if args.uplink else link
        latency = parse_time(args.latency)
        described = {"bandwidth_Bps": (20e9, 10e9, link, uplink), "latency_s": (0.3e-6, 0.6e-6, latency, latency)}
    topology = Topology(nodes=args.nodes, cores=args.ppn, sockets=args.sockets, switch_size=args.switch_size,
                        **described)
    hosts = read_hosts(args.hosts) if args.hosts else None
    matrix = read_traffic_matrix(args.matrix, args.store_run)
    placement = place(
        matrix, topology, strategy=args.strategy, seed=args.seed, balance=args.balance, timeout=args.timeout
    )
    text = placement.write(args.format, hosts=hosts)
    block = place(matrix, topology, strategy="block")
    prediction = _prediction(args, matrix, placement) if args.prediction else None
    if args.output is None:
        sys.stdout.write(text)
    else:
        atomic.write_text(args.output, text)
    report = sys.stdout if args.output else sys.stderr  # the summary never mixes into a launch file on stdout
    print(_summary(args.strategy, placement.cost(), block.cost(), placement.info), file=report)
    if prediction is not None:
        _write_prediction(Path(args.prediction), prediction, report)
    return 0


def _prediction(args: argparse.Namespace, data: Any, placement: Any) -> Any:
    """``place --prediction FILE``: the prediction of the re-run."""
    from perfkit.placement.network import Network, parse_rate, parse_time
    from perfkit.placement.predict import predict_placement

    if not hasattr(data, "data_vars") or "profile" not in data:
        raise ValueError(f"{args.matrix}: --prediction needs a profile (elapsed and MPI times), not a bare matrix")
    network = None
    if args.bandwidth is not None:
        network = Network.described(parse_rate(args.bandwidth), latency_s=parse_time(args.latency),
                                    uplink_bit_s=parse_rate(args.uplink) if args.uplink else None)
    return predict_placement(data, placement, network)


def _write_prediction(out: Path, p: Any, report: TextIO) -> None:
    """The prediction as JSON, written atomically; its summary on ``report``."""
    from perfkit import atomic
    from perfkit.commands.info import prediction_line
    from perfkit.commands.render import finite, json_text

    atomic.write_text(out, json_text(finite(p.as_dict())))
    print(prediction_line(p, str(out)), file=report)


def _summary(strategy: str, cost: Any, block: Any, info: dict[str, Any]) -> str:
    from perfkit.commands.info import placement_summary

    return placement_summary(strategy, cost, block, info)


_COLLECT_EPILOG = """\
The launch command follows '--' exactly as you would type it. The collector library is built on
first use with your MPI's compiler wrappers (mpicc, and mpifort for Fortran programs; set MPICC /
MPIFORT to use others) and preloaded into every rank: through Open MPI's 'mpirun -x', MPICH's or
Intel MPI's 'mpiexec -genv', or the environment (srun, a single process).

examples:
  perfkit collect -o run.mpinside -- mpirun -np 4 ./app 10
  perfkit collect -o run.mpinside --slt --collective-wait --matrices -- mpirun -np 4 ./app 10
  perfkit collect -o run.mpinside --slt -- mpiexec -n 64 -ppn 32 ./app      (MPICH, Intel MPI)
  perfkit collect -o run.mpinside --slt -- srun -n 256 ./app                (Slurm)
  perfkit collect -o run.mpinside -- mpirun -np 4 python3 prog.py          (mpi4py)
  perfkit collect -o run.mpinside --trace -- mpirun -np 4 ./app 10         (and run.mpinside.otf2/)

The exit status is the program's. OUT is written only when every rank reached MPI_Finalize, and
atomically (a temporary file renamed); an existing OUT is replaced only with --force, and a run that
fails or is stopped leaves it as it was. SIGINT, SIGTERM or SIGHUP stop the launch (status 130, 143,
129); if perfkit itself is killed, a watchdog stops the launch. Read OUT with perfkit.open_profile(OUT).
See docs/collector.md.
"""


@command("collect", "Profile an MPI program: per-rank, per-function MPI times, bytes and calls, as MPInside tables.")
def _configure_collect(parser: argparse.ArgumentParser) -> Runner:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _COLLECT_EPILOG
    parser.usage = ("perfkit collect -o OUT [--force] [--slt] [--collective-wait] [--matrices] [--no-cpu] "
                    "[--trace [--trace-buffer MB]] [--timeout S] -- LAUNCH...")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the profile to write (MPInside text tables), e.g. run.mpinside")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing OUT (and OUT.otf2/ with --trace); default: refuse it before the "
                             "launch")
    parser.add_argument("--slt", action="store_true",
                        help="measure send-late time: the part of each receive (Recv, Sendrecv, the Wait/Test that "
                             "completes an Irecv) spent because the matching send had not started yet; shown as "
                             "w_MPI_<call>, the rest stays under MPI_<call> as transfer")
    parser.add_argument("--collective-wait", action="store_true",
                        help="insert a barrier before every collective and time it as b_MPI_<call>: the wait for "
                             "the last rank to arrive; the collective's own column keeps the rest")
    parser.add_argument("--matrices", action="store_true",
                        help="record sender->receiver bytes, message counts and receive time, and message-size "
                             "histograms per rank and call")
    parser.add_argument("--no-cpu", dest="cpu", action="store_false",
                        help="do not measure CPU: by default each rank's CPU time in every MPI call and in compute "
                             "(the thread's CPU clock, 2 reads a call, 0.8 us each here), its context switches, "
                             "time waiting for a core and allowed cores")
    parser.add_argument("--timeout", type=_number(float, 0, above=True), default=None, metavar="S",
                        help="stop the launch (and everything it started) after S seconds; exit status 124")
    parser.add_argument("--trace", action="store_true",
                        help="also write an OTF2 trace of every profiled call and message, OUT.otf2/ (needs the "
                             "OTF2 library: Debian libotf2-trace-dev); read it with perfkit.open_profile(OUT.otf2)")
    parser.add_argument("--trace-buffer", type=_number(float, 0, above=True), default=None, metavar="MB",
                        help="with --trace: events each rank buffers before flushing them to disk [MiB] "
                             "(default 64)")
    parser.add_argument("launch", nargs=argparse.REMAINDER, help="the launch command, after '--'")
    return _run_collect


def _run_collect(args: argparse.Namespace) -> int:
    from perfkit import signals

    before = _identity(args.output)
    return signals.run("collect", lambda: _collect(args), lambda: f"launch stopped, {_fate(args.output, before)}, "
                                                                  f"{_temporaries([args.output])}")


def _collect(args: argparse.Namespace) -> int:
    import warnings

    from perfkit.collect import collect
    from perfkit.collect.run import TRACE_BUFFER_MB, check_outputs, launch_files
    from perfkit.errors import PerfkitWarning

    launch = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    if args.trace_buffer is not None and not args.trace:
        print("perfkit collect: --trace-buffer needs --trace", file=sys.stderr)
        return 2
    output = Path(args.output)
    _check_outputs([(output, False)], args.force, launch_files(launch))  # before the launch, not after the run
    check_outputs(output, launch, overwrite=args.force, trace=args.trace)
    with warnings.catch_warnings():  # the temporaries are swept and reported by _check_outputs
        warnings.filterwarnings("ignore", "removed .* temporary", PerfkitWarning)
        result = collect(launch, output, slt=args.slt, collective_wait=args.collective_wait, matrices=args.matrices,
                         cpu=args.cpu, timeout=args.timeout, trace=args.trace,
                         trace_buffer=args.trace_buffer or TRACE_BUFFER_MB, overwrite=args.force)
    print(f"perfkit collect: {result.message}", file=sys.stderr)
    return result.returncode


@command("testbed", "Run a command on an emulated cluster on this machine (network namespaces, shaped links).")
def _configure_testbed(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.collect.testbed import command as testbed_command

    testbed_command.configure(parser)
    return testbed_command.run


@command("loop", "The closed loop on an emulated cluster: profile, place, predict, re-run placed anew, measure.")
def _configure_loop(parser: argparse.ArgumentParser) -> Runner:
    from perfkit.collect.testbed import command as testbed_command

    testbed_command.configure_loop(parser)
    return testbed_command.run_loop


# The analyses from a shell: diagnose, whatif, pop, scaling, compare (perfkit/commands/analyses.py).
def _register_analyses() -> None:
    from perfkit.commands.analyses import COMMANDS

    for name, (help_text, configure) in COMMANDS.items():
        command(name, help_text)(configure)


_register_analyses()
