"""The local control plane's command line, for `make cluster-up` and `make cluster-down`.

    python hack/controlplane.py up|down|status --state DIR

The runner itself is `mcpg_testing.controlplane` (tests/support), installed into the dev venv by `make venv`.
"""

import sys

from mcpg_testing import controlplane

if __name__ == "__main__":
    sys.exit(controlplane.main())
