"""Manifests the end-to-end tests apply, built once."""

from __future__ import annotations

from typing import Any


def polled(name: str) -> dict[str, Any]:
    """The smallest ResourceWatch: polled every 60 s, needing no Secret."""
    return {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": name},
        "spec": {"uri": f"x://{name}", "backend": {"http": {"url": "http://upstream/"}}},
    }
