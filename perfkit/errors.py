"""Exceptions and warnings raised by perfkit."""

from __future__ import annotations

from os import PathLike


class PerfkitFormatError(ValueError):
    """A profile file does not match the format its reader expects.

    Carries ``path`` (the file) and ``line`` (1-based line number, or ``None`` when
    the problem is not tied to a line, e.g. an XML element path given in the message).
    """

    def __init__(self, path: str | PathLike | None, line: int | None, message: str):
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message
        where = self.path or "<data>"
        if line is not None:
            where = f"{where}, line {line}"
        super().__init__(f"{where}: {message}")


class ContractError(ValueError):
    """A Dataset breaks the canonical perfkit data contract."""


class PerfkitWarning(UserWarning):
    """Something in the input was odd but could be read honestly (kept in ``ds.attrs``)."""
