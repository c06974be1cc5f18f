"""`mcpg-operator`: run kopf on this package's handlers module, by module name (never by file path).

A file path would make kopf import the handlers twice under two names and break relative imports; `-m`
imports them once, as the installed package. Extra arguments pass through to `kopf run`.
"""

from __future__ import annotations

import os
import sys

HANDLERS = "mcpg_operator.handlers"


def kopf_argv(argv: list[str]) -> list[str]:
    """The `kopf run` command line: standalone (one replica, no peering), our handlers, and any extra flags."""
    args = ["kopf", "run", "--standalone", "-m", HANDLERS]
    if not any(a in ("-A", "--all-namespaces") or a.startswith(("-n", "--namespace")) for a in argv):
        namespaces = os.environ.get("MCPG_WATCH_NAMESPACES", "").split(",")
        namespaces = [ns.strip() for ns in namespaces if ns.strip()]
        args += [f"--namespace={ns}" for ns in namespaces] or ["--all-namespaces"]
    return args + argv


def main(argv: list[str] | None = None) -> int:
    import kopf.cli  # imported here: `mcpg-operator --help` should not pay for it twice

    sys.argv = kopf_argv(sys.argv[1:] if argv is None else argv)
    kopf.cli.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
