"""The URLs of a gateway serving on loopback, however it was started (in-process or as its image's program)."""

from __future__ import annotations

from typing import Protocol


class _Ports(Protocol):
    @property
    def port(self) -> int: ...

    @property
    def admin_port(self) -> int: ...


class GatewayUrls:
    """Mixed into a class with `port` (MCP and webhooks) and `admin_port` (metrics and the admin API)."""

    __slots__ = ()

    @property
    def base(self: _Ports) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self: _Ports) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def admin(self: _Ports) -> str:
        return f"http://127.0.0.1:{self.admin_port}"
