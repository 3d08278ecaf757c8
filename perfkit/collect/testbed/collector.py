"""``perfkit collect`` run on the testbed's first node, called as :func:`perfkit.collect.collect` is.

``collect_on(tb)`` returns a function with ``collect``'s parameters that runs the command line
``perfkit collect ... -- LAUNCH`` inside the testbed (where ``mpirun`` spans its nodes), so that
code written for one machine (the lab's ``run``, for instance) runs unchanged across emulated nodes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from perfkit.collect.run import TRACE_BUFFER_MB, CollectResult, trace_path
from perfkit.collect.testbed.cluster import Testbed

#: The ``perfkit`` command of this Python environment.
PERFKIT = str(Path(sys.executable).with_name("perfkit"))


def collect_command(launch: Sequence[str], output: Path, *, slt: bool, collective_wait: bool, matrices: bool,
                    trace: bool, trace_buffer: float, overwrite: bool = False, cpu: bool = True) -> list[str]:
    """The ``perfkit collect`` command line with these options."""
    flags = [flag for on, flag in ((slt, "--slt"), (collective_wait, "--collective-wait"), (matrices, "--matrices"),
                                   (not cpu, "--no-cpu"), (trace, "--trace"), (overwrite, "--force")) if on]
    if trace:
        flags += ["--trace-buffer", f"{trace_buffer:g}"]
    return [PERFKIT, "collect", "-o", str(output), *flags, "--", *launch]


def collect_on(tb: Testbed) -> Callable[..., CollectResult]:
    """A ``collect`` that runs on ``tb``; its ``message`` is everything the command printed."""

    def collect(launch: Sequence[str], output: str | os.PathLike, *, slt: bool = False,
                collective_wait: bool = False, matrices: bool = False, cpu: bool = True, timeout: float | None = None,
                env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None, trace: bool = False,
                trace_buffer: float = TRACE_BUFFER_MB, overwrite: bool = False) -> CollectResult:
        output = Path(output)
        command = collect_command(launch, output, slt=slt, collective_wait=collective_wait, matrices=matrices,
                                  trace=trace, trace_buffer=trace_buffer, overwrite=overwrite, cpu=cpu)
        log = output.with_name(output.name + ".log")
        with open(log, "w") as fh:
            report = tb.run(command, env=env, cwd=cwd, timeout=timeout, stdout=fh, stderr=fh)
        archive = trace_path(output)
        return CollectResult(report["exit_status"], output if output.exists() else None, log.read_text(),
                             report["wall_s"], archive if trace and (archive / "traces.otf2").is_file() else None)

    return collect
