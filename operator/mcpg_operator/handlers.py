"""kopf handlers: thin wiring only. Decisions live in pure modules beside this one.

This module is imported by `kopf run -m mcpg_operator.handlers`; importing it registers the handlers.
"""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # In a pod, the mounted ServiceAccount; elsewhere (tests, a laptop) the kubeconfig in $KUBECONFIG.
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Events are for what a user should see; kopf's own per-handler chatter stays in the log.
    settings.posting.level = 30  # logging.WARNING
    # Watches that go quiet (a dropped connection behind a load balancer) are re-established.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
