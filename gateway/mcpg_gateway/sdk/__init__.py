"""The one door to the MCP SDK (`mcp`, pinned exactly): every place the gateway leans on how the SDK works.

The gateway writes past the SDK where the SDK offers no seam (a stdio connection's scratch and exit stack), keeps
the handshake-era sessions itself in front of the SDK's stateless mode, and reads each /mcp request before the SDK
does, the SDK's way. Each such reliance is
here, typed, so that an SDK upgrade is fixed in this folder, and `tests/unit/gateway/test_sdk_contract.py`
checks each one's behaviour through the real SDK. Only this package and the protocol faces (`mcp_handlers`,
`stdio_transport`, `subscribe_client`: modules that *are* MCP) import `mcp` (`.importlinter`, `sdk-one-door`).

Module map:

    protocol    the versions of each era, JSON-RPC codes, the listen `subscriptionId` `_meta` key
    requests    an /mcp request as the SDK reads it: its era, the session it names or opens, its body's parse
    manager     /mcp's session manager: the door, the sessions, the SDK's stateless manager; idle sessions end
    connection  a session's scratch and exit stack: the door's session, or a stdio connection's (private), typed
    auth        the SDK's bearer-auth middleware and auth context; `act_as` for stdio, which has no token
    surface     what the server tells a client in each era, as the SDK serializes it (the server card's capabilities)
    responses   a request's answer as the last event of an SSE response, in the SDK's bytes (a listen's result)
    door        handshake-era sessions kept by the gateway over the SDK's stateless mode, answered as the SDK's
"""
