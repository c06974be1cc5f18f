#!/usr/bin/env bash
# `operator` must stay a plain folder: an operator/__init__.py (or any .py directly in it) would shadow
# the standard library's `operator` module and break kopf, pytest and much of the stdlib.
set -euo pipefail
python="${1:-python3}"
if compgen -G "operator/*.py" >/dev/null || compgen -G "gateway/*.py" >/dev/null; then
  echo "error: operator/ and gateway/ are plain folders; move these into their mcpg_* package:" >&2
  ls operator/*.py gateway/*.py 2>/dev/null >&2
  exit 1
fi
"$python" -c 'import operator, kopf; operator.itemgetter'
python3 -I -c 'import operator; operator.itemgetter'
