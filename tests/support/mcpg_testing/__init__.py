"""mcpg's test and demo tooling: support code is code (typed, importable, tested by use), not conftest.py.

Modules are named after what they hold; `conftest.py` files only turn them into pytest fixtures.
"""

BOUND_S = 10.0
"""The bound on every wait in a test: tests wait on events, never sleep, and never wait forever."""
