"""Who opened each stateful session: what the session limit counts (`sessions.SessionLimit`).

The SDK's session manager records the credential that opened each session, to answer 404 to any other one, and
forgets it when the session ends (DELETE, idle timeout, shutdown). It keeps that record on a private attribute
(`StreamableHTTPSessionManager._session_owners`, pinned mcp); this is the one place that reads it, and
`test_sdk_contract.py` checks through the real SDK that a session opened is counted and a deleted one is not.
"""

from __future__ import annotations

from collections.abc import Container, KeysView, Mapping

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


def held(manager: StreamableHTTPSessionManager, principal_id: str, among: Container[str] | None = None) -> int:
    """How many of `manager`'s open sessions the principal `principal_id` (its credential's client_id) opened;
    with `among`, only those whose id is in it."""
    return sum(
        1
        for sid, owner in _owners(manager).items()
        if owner.get("client_id") == principal_id and (among is None or sid in among)
    )


def by_session(manager: StreamableHTTPSessionManager) -> dict[str, str]:
    """Each open session's id -> the client_id of the credential that opened it."""
    return {sid: str(owner.get("client_id")) for sid, owner in _owners(manager).items()}


def open_ids(manager: StreamableHTTPSessionManager) -> KeysView[str]:
    """The ids of `manager`'s open sessions that were opened with a credential (a live view, not a copy)."""
    return _owners(manager).keys()


def _owners(manager: StreamableHTTPSessionManager) -> Mapping[str, Mapping[str, object]]:
    owners: Mapping[str, Mapping[str, object]] = manager._session_owners
    return owners
