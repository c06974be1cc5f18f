"""The admin HTTP surface (port 9090): /metrics and the configuration's acknowledgement, and /admin/v1/* behind the
admin token.

The admin API needs `Authorization: Bearer $MCPG_ADMIN_TOKEN` (the scheme in any case, as RFC 7235 has it and
`/mcp` takes it), the token compared as bytes in constant time; with no admin token configured it answers 403 and
says how to enable it. The token must be visible ASCII: a header's bytes are compared with it, and a client
sends non-ASCII as UTF-8 while the server reads headers as latin-1, so such a token could never match; the app
refuses to build with one. Nothing here shows a secret: a webhook token appears only when the gateway generated
it itself (the user has no other way to learn it). On a bus, each pull watch says whether this gateway owns it
(`owner`) and who holds its lease as far as this gateway knows (`lease_holder`), and /admin/v1/bus shows the bus
as this gateway sees it (host:port). /admin/v1/upstreams lists the upstreams that rate-limited this gateway
(host:port, never their credentials), and each watch says until when its reads are paused by one
(`rate_limited_until`). A watch asked to stop that still runs is listed under `stopping` until it has.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcpg_gateway import liveness, peers
from mcpg_gateway.contract import acknowledgement
from mcpg_gateway.contract.errors import ConfigError, Problem
from mcpg_gateway.gateway import Gateway

Endpoint = Callable[[Request], Awaitable[Response]]
ADMIN_TOKEN_ENV = "MCPG_ADMIN_TOKEN"  # noqa: S105  # the variable's name, not a token


def admin_token_problem(token: str) -> str | None:
    """Why `token` cannot be the admin token, or None. Names no character of it: it is a secret."""
    outside = sum(1 for char in token if not "!" <= char <= "~")
    if not outside:
        return None
    return (
        "the admin token must consist only of visible ASCII characters (0x21-0x7E), since an HTTP header carries "
        f"it; this one has {outside} character(s) outside that range"
    )


def bearer_credentials(authorization: str) -> bytes | None:
    """The credentials of an `Authorization: Bearer …` header value, as the bytes sent; None for another scheme."""
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.lstrip(" ").encode("latin-1")  # Starlette decoded the header as latin-1: its bytes again


def build(gw: Gateway) -> Starlette:
    """The admin app; ConfigError if `MCPG_ADMIN_TOKEN` is set to a token no client could present."""
    if gw.options.admin_token and (problem := admin_token_problem(gw.options.admin_token)):
        raise ConfigError([Problem(ADMIN_TOKEN_ENV, problem)])
    return Starlette(
        routes=[
            Route("/metrics", endpoint=_metrics(gw)),
            Route(acknowledgement.PATH, endpoint=_acknowledgement(gw)),
            Route("/admin/v1/watches", endpoint=_admin(gw, _watches)),
            Route("/admin/v1/webhooks", endpoint=_admin(gw, _webhooks)),
            Route("/admin/v1/bus", endpoint=_admin(gw, _bus)),
            Route("/admin/v1/upstreams", endpoint=_admin(gw, _upstreams)),
        ]
    )


def _metrics(gw: Gateway) -> Endpoint:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


def _acknowledgement(gw: Gateway) -> Endpoint:
    """What this process serves, for the operator to count (`contract/acknowledgement.py`): digests, paths and
    reasons only, so it needs no token, like /metrics."""

    async def acknowledgement_(request: Request) -> Response:
        ack = gw.served.acknowledgement()
        return JSONResponse(ack.model_dump(mode="json"))

    return acknowledgement_


def _admin(gw: Gateway, view: Callable[[Gateway], dict[str, Any]]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        expected = gw.options.admin_token
        if not expected:
            return JSONResponse(
                {"error": "the admin API is disabled: set MCPG_ADMIN_TOKEN to enable it"}, status_code=403
            )
        presented = bearer_credentials(request.headers.get("authorization", ""))
        if presented is None or not hmac.compare_digest(presented, expected.encode("ascii")):
            return JSONResponse(
                {"error": "missing or wrong admin token"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="mcpg-admin"'},
            )
        return JSONResponse(view(gw))

    return endpoint


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _from_now(seconds: float | None) -> str | None:
    """A pause's end as wall time (the pauses run on the monotonic clock: only what is left is known)."""
    return None if seconds is None else _iso(time.time() + seconds)


def _watches(gw: Gateway) -> dict[str, Any]:
    out = []
    for w in gw.fanout.running_watches():
        strategy = w.binding.watch.strategy if w.binding.watch else None
        out.append(
            {
                "uri": w.uri,
                "resource": w.binding.entry.name,
                "strategy": w.strategy_type,
                "subscribers": len(w.subscribers),
                "interval_ms": getattr(strategy, "effective_interval_ms", None),
                "cadence_ms": _ms(gw.fanout.cadence_s(w)),
                "started": _iso(w.started_at),
                "last_fired": _iso(w.last_fired),
                "last_successful_read": _iso(w.stats.last_success),
                "last_failed_read": _iso(w.stats.last_failure),
                "failed_reads": w.stats.failures,
                "source": _source(w.stats.connection),
                "owner": gw.owner_of(w.uri),
                "lease_holder": _holder(gw, w.uri),
                "rate_limited_until": _from_now(gw.reader.paused_for(w.binding)),
            }
        )
    return {"watches": out, "stopping": _stopping(gw)}


def _holder(gw: Gateway, uri: str) -> str | None:
    """Who holds a pull watch's lease on a bus, as far as this gateway knows (`ownership.Owners.holder`)."""
    return gw.owners.holder(uri) if gw.owners is not None and gw.owner_of(uri) is not None else None


def _stopping(gw: Gateway) -> list[dict[str, Any]]:
    """Watchers whose last subscriber left and that have not stopped yet: a watch never runs out of sight."""
    return [
        {"uri": s.subject.uri, "resource": s.subject.binding.entry.name, "strategy": s.subject.strategy_type}
        | {"stopping_since": _iso(s.since)}
        for s in gw.fanout.stopping_watches()
    ]


def _source(conn: liveness.Connection) -> dict[str, Any] | None:
    """The watch's connection to its event source (`liveness.py`); None for a watch that holds none."""
    if not conn.held:
        return None
    return {
        "address": conn.source,
        "state": "up" if conn.up else "down",
        "last_round_trip": _iso(conn.last_round_trip),
        "down_since": _iso(conn.down_since),
        "losses": conn.losses,
    }


def _ms(seconds: float | None) -> int | None:
    """A pull watch's cadence now, as its subscribers' leases make it (`lease.py`); None for a push watch."""
    return None if seconds is None else round(seconds * 1000)


def _webhooks(gw: Gateway) -> dict[str, Any]:
    return {
        "webhooks": [
            {
                "resource": r.name,
                "uri": r.uri,
                "path": "/webhooks/resource-updated/{token}",
                "generated_token": r.generated_token,
                # The scheme a delivery must be signed with (never a secret), or null: the token alone fires it.
                "signature": r.verifier.scheme if r.verifier is not None else None,
            }
            for r in gw.webhooks.routes()
        ]
    }


def _bus(gw: Gateway) -> dict[str, Any]:
    """The bus as this gateway sees it (host:port only); `{"bus": null}` without one."""
    b = gw.bus
    if b is None:
        return {"bus": None}
    return {
        "bus": {
            "address": b.where,
            "instance": b.instance,
            "connected": b.connected,
            "losses": b.outages,
            "buckets_ready": b.buckets is not None,
            "buckets_error": b.buckets_error,
            "ready": not b.unready(),
            "peers": _peers(gw),
            "down_long": gw.down_long(),
            **_elsewhere(gw.peers_decision()),
        }
    }


def _peers(gw: Gateway) -> list[dict[str, Any]]:
    """The other gateways heard from lately: how many resources each holds up and down, whether it says it is
    ready, and whether its word counts yet (`peers.py`)."""
    if gw.peers is None:
        return []
    return [
        {"instance": h.report.instance, "up": len(h.report.up), "down": len(h.report.down)}
        | {"ready": h.report.ready, "trusted": h.trusted}
        for h in gw.peers.fresh(time.time())
    ]


def _elsewhere(decision: peers.Decision) -> dict[str, Any]:
    """Whom this gateway defers to, or for which resources it stays although a trusted gateway holds them up."""
    found = decision.elsewhere
    return {
        "preferred_elsewhere": None if found is None else {"resource": found.resource, "gateway": found.gateway},
        "anchor_for": [
            {"resource": a.resource, "gateway": a.gateway, "sharing": list(a.sharing)} for a in decision.anchored
        ],
    }


def _upstreams(gw: Gateway) -> dict[str, Any]:
    """The upstreams paused now or limited recently, one row per credentials (which are never shown)."""
    return {
        "upstreams": [
            {
                "upstream": u.upstream,
                "paused_until": _from_now(u.paused_for_s),
                "consecutive_429s": u.consecutive,
                "total_429s": u.total,
                "resources": list(u.resources),
            }
            for u in gw.reader.pauses.snapshot()
        ]
    }
