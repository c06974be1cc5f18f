"""`mcpg-operator`: run kopf on this package's handlers module, by module name (never by file path).

A file path would make kopf import the handlers twice under two names and break relative imports; `-m`
imports them once, as the installed package. Extra arguments pass through to `kopf run`. The settings are
loaded here first so that a bad variable stops the process with a clear message before kopf starts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mcpg_operator import settings

HANDLERS = "mcpg_operator.handlers"
USAGE_ERROR = 2


def kopf_argv(argv: list[str], namespaces: Sequence[str]) -> list[str]:
    """The `kopf run` command line: standalone (one replica, no peering), our handlers, and any extra flags."""
    args = ["kopf", "run", "--standalone", "-m", HANDLERS]
    if not any(a in ("-A", "--all-namespaces") or a.startswith(("-n", "--namespace")) for a in argv):
        args += [f"--namespace={ns}" for ns in namespaces] or ["--all-namespaces"]
    return args + argv


def main(argv: list[str] | None = None) -> int:
    try:
        loaded = settings.load()
    except settings.SettingsError as e:
        print(f"mcpg-operator: invalid settings: {e}", file=sys.stderr)
        return USAGE_ERROR
    import kopf.cli  # imported here: `mcpg-operator --help` should not pay for it twice

    sys.argv = kopf_argv(sys.argv[1:] if argv is None else argv, loaded.watch_namespaces)
    kopf.cli.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
