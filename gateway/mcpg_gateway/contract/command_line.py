"""What mcpg's three programs share on their command line: one exit status per class of failure, a usage error
in one line, `--version`, and how a port that cannot be bound is said.

In the contract because the operator may import nothing else of the gateway. It imports the standard library
only, and each program imports its heavy modules after parsing, so `--help` and `--version` answer at once.
"""

from __future__ import annotations

import argparse
import enum
import errno
import socket
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

DISTRIBUTION = "mcpg-watch"
"""The installed distribution whose version `--version` prints."""


class Exit(enum.IntEnum):
    """Every exit status of the three programs, each one class of failure; a number means the same in all three."""

    OK = 0
    FAILED = 1  # Python's own on a bug (with its traceback); the operator's after losing its Lease
    USAGE = 2  # argparse's own; also a configuration or an environment variable refused
    UNBINDABLE = 3
    UNREACHABLE = 4
    # mcpg-subscribe's own, from what the gateway answered:
    UNAUTHORIZED = 5
    FORBIDDEN = 6
    NOT_FOUND = 7
    TLS = 8
    ENDED = 9
    REFUSED = 10
    HTTP = 11


SHARED_MEANINGS = {
    Exit.USAGE: "bad command line: an unknown flag, or a bad value (an unknown choice, a port out of range)",
    Exit.UNBINDABLE: "a port in use, or an address this machine cannot listen on (the flag is named)",
    Exit.UNREACHABLE: "cannot connect: connection refused (after retrying), unknown host or timeout",
}


def epilog(rows: Iterable[tuple[Exit, str]], after: str = "") -> str:
    """The `--help` epilog: "exit status:" and one row per status (a newline in a meaning continues it, indented),
    then `after`, a paragraph of its own."""
    table = "\n".join(f"  {status.value:<3} {meaning.replace(chr(10), chr(10) + ' ' * 6)}" for status, meaning in rows)
    return f"exit status:\n{table}" + (f"\n\n{after}" if after else "")


def version() -> str:
    """The installed distribution's version (the one version of all three programs, the chart and the images)."""
    from importlib import metadata  # here: 40 ms of imports (email, zipfile) that only --version needs

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "(unknown: the mcpg-watch distribution is not installed)"


class _Version(argparse.Action):
    """`--version`: "<prog> <version>" on stdout, exit 0; the version is looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(f"{parser.prog} {version()}")
        parser.exit(Exit.OK)


class Parser(argparse.ArgumentParser):
    """argparse with `--version` and a usage error in one line, cause first ("--port: 'x' is not a port"), exit 2:
    argparse's own error prints the whole usage first, which buries the line that says what is wrong."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)
        self.add_argument("--version", action=_Version)

    def error(self, message: str) -> NoReturn:
        cause = message.removeprefix("argument ")  # "argument --port: ..." names the flag; the word adds nothing
        self.exit(Exit.USAGE, f"{self.prog}: {cause}; see {self.prog} --help\n")


def port(text: str) -> int:
    """A TCP port as a flag takes it: a whole number from 0 (the kernel picks one) to 65535."""
    if not text.strip().isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (a whole number from 0 to 65535)")
    return int(text)


def unbindable(error: OSError, *, port: str, address: str) -> str:
    """The one line for a listening socket that could not be bound, cause first. `port` and `address` say them
    as the command line did: "--port 8080" and "--host 10.0.0.9", or "--metrics-bind-address :8080" twice."""
    if isinstance(error, socket.gaierror):
        return f"{address} is not an address of this machine: the name does not resolve ({error.strerror})"
    if error.errno == errno.EADDRINUSE:
        return f"{port} is in use: stop what listens there, or choose another port"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{address} is not an address of this machine: choose one it has (0.0.0.0 for every interface)"
    if error.errno == errno.EACCES:
        return f"{port} cannot be bound: permission denied (ports below 1024 need privileges)"
    return f"{port} cannot be bound on {address}: {error.strerror or error}"
