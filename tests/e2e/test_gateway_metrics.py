"""The gateways' /metrics, scraped as the chart's gateway ServiceMonitor tells Prometheus to: through the port
it names on the Service the operator rendered, reached at the Service's ClusterIP (kube-proxy's rules)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx2
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcpg_testing.controlplane import ControlPlane
from mcpg_testing.release import OperatorRelease

CHART = Path(__file__).parents[2] / "charts" / "mcpg"


def gateway_monitor(plane: ControlPlane) -> dict[str, Any]:
    argv = [str(plane.binary("helm")), "template", "t", str(CHART), "--set", "gateway.serviceMonitor.enabled=true"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    monitors: list[dict[str, Any]] = [
        d
        for d in yaml.safe_load_all(out)
        if d and d["kind"] == "ServiceMonitor" and d["metadata"]["name"].endswith("-gateways")
    ]
    [monitor] = monitors
    return monitor


def test_the_charts_gateway_service_monitor_scrapes_every_gateways_metrics_through_its_service(
    control_plane: ControlPlane, operator: OperatorRelease, namespace: str
) -> None:
    watch = {
        "apiVersion": "mcpg.dev/v1alpha1",
        "kind": "ResourceWatch",
        "metadata": {"name": "scraped"},
        "spec": {"uri": "scrape://me", "backend": {"http": {"url": "http://127.0.0.1:9/x"}}},
    }
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(watch))
    control_plane.kubectl("-n", namespace, "wait", "--for=condition=Ready", "resourcewatch/scraped", "--timeout=90s")
    monitor = gateway_monitor(control_plane)
    [endpoint] = monitor["spec"]["endpoints"]
    service = yaml.safe_load(
        control_plane.kubectl("-n", namespace, "get", "service", "mcpg-gateway", "-o", "yaml").stdout
    )
    # The monitor selects the Service the operator rendered, by its labels, and names one of its ports.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    url = control_plane.service_url(namespace, "mcpg-gateway", endpoint["port"]) + endpoint["path"]
    resp = httpx2.get(url, timeout=10)
    assert resp.status_code == 200
    families = {f.name for f in text_string_to_metric_families(resp.text)}
    assert {"mcpg_watch_fired", "mcpg_webhook_requests", "mcpg_subscribers"} <= families
