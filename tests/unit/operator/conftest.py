"""Fixtures for the operator's unit tests: an in-memory API and a clock the test moves."""

from __future__ import annotations

import pytest

from mcpg_testing.fake_kube import FakeKube
from mcpg_testing.namespace import Clock


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def clock() -> Clock:
    return Clock()
