"""The e2e tier: one real cluster per session (a real node), the operator installed by helm, a namespace per test.

Every test here is marked `e2e`. The fixtures are `mcpg_testing.fixtures`: when a test fails, the tail of each
component's log is attached to its report, and the full logs stay in the session's tmp dir.
"""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not imported fixtures: registered once per session (a second registration is a no-op), so the
    # integration tier's image tests share this tier's control plane and operator when both tiers run.
    # (`pytest_plugins` is refused in a conftest below the top level.)
    config.pluginmanager.import_plugin("mcpg_testing.fixtures")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a session mixing `own_cluster` tests with the others, before anything starts: the machine holds one
    real node, and the session's cluster would hold it while an `own_cluster` test started its own."""
    own = [i for i in session.items if i.get_closest_marker("own_cluster")]
    if own and len(own) < len(session.items):
        raise pytest.UsageError(
            f"{len(own)} selected tests start a cluster of their own (marked own_cluster) and the others share the "
            'session\'s: run them apart, `pytest tests/e2e -m own_cluster` then `-m "not own_cluster"` (make test-e2e)'
        )
