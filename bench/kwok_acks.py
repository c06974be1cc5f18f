"""Answer for every gateway pod on kwok's fake node as the gateway would: its acknowledgement of what it serves.

kwok runs no container, so nothing would answer the operator's question to each Ready gateway pod (`acks.py`):
every pass would wait on pods that never acknowledge, polling them forever. This process stands in for them. It
follows, by two watches as a gateway follows its Secret, every namespace's configuration Secret and every gateway
pod (kwok gives pods loopback addresses without the real node: `controlplane.KWOK_LOOPBACK_CIDR`), and answers
`GET /admin/v1/configuration` on the admin port of every address with the acknowledgement a gateway serving that
Secret's configuration gives (`contract.digests`: the document's and each entry's digest, computed here from the
Secret's text as the gateway computes them), as soon as its watch has seen the Secret. A pod it has not seen, or
whose namespace has no configuration yet, gets a 503, as a gateway not serving yet would.

    python bench/kwok_acks.py KUBECONFIG [--port 9090]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import yaml

from mcpg_gateway.contract import acknowledgement, digests
from mcpg_operator import objects

GATEWAY_PODS = {"labelSelector": ",".join(f"{k}={v}" for k, v in objects.SELECTOR.items())}
CONFIG_SECRETS = {"fieldSelector": f"metadata.name={objects.CONFIG_SECRET}"}
RECONNECT_S = 0.5


class Served:
    """What each namespace's configuration Secret holds (as serving digests) and which pod has which address."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.serving: dict[str, dict[str, Any]] = {}
        """Namespace -> the `serving` part of its pods' acknowledgement."""
        self.pods: dict[str, tuple[str, str]] = {}
        """Pod address -> (namespace, pod name)."""

    def secret(self, kind: str, obj: dict[str, Any]) -> None:
        ns = obj["metadata"]["namespace"]
        if kind == "DELETED":
            with self.lock:
                self.serving.pop(ns, None)
            return
        raw = yaml.load(base64.b64decode(obj["data"][objects.CONFIG_KEY]), Loader=yaml.CSafeLoader)
        serving = {
            "digest": digests.document(raw),
            "entries": sorted(digests.entries(raw).values()),
            "since": time.time(),
            "source": "secret",
            "resource_version": obj["metadata"]["resourceVersion"],
        }
        with self.lock:
            self.serving[ns] = serving

    def pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta, ip = obj["metadata"], (obj.get("status") or {}).get("podIP")
        if not ip:
            return
        with self.lock:
            if kind == "DELETED":
                if self.pods.get(ip) == (meta["namespace"], meta["name"]):
                    del self.pods[ip]
            else:
                self.pods[ip] = (meta["namespace"], meta["name"])

    def answer(self, ip: str) -> bytes | None:
        with self.lock:
            ns, name = self.pods.get(ip, ("", ""))
            serving = self.serving.get(ns)
        if serving is None:
            return None
        ack = acknowledgement.Acknowledgement(instance=name, serving=acknowledgement.Serving(**serving))
        return ack.model_dump_json().encode()


def follow(
    kubeconfig: Path, path: str, params: dict[str, str], on_event: Callable[[str, dict[str, Any]], None]
) -> None:
    """Apply every event of a watch of `path` (a fresh one, from a full listing, whenever it ends)."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    headers = {"authorization": f"Bearer {cfg['users'][0]['user']['token']}"}
    with httpx2.Client(base_url=cfg["clusters"][0]["cluster"]["server"], headers=headers, verify=False) as http:
        while True:
            try:
                with http.stream("GET", path, params={**params, "watch": "1"}, timeout=None) as response:
                    for line in response.iter_lines():
                        if line:
                            event = json.loads(line)
                            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                                on_event(event["type"], event["object"])
            except httpx2.HTTPError as e:
                print(f"watch of {path} ended ({type(e).__name__}); again", file=sys.stderr, flush=True)
            time.sleep(RECONNECT_S)  # not a wait for a condition: a back-off before the next watch


def handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.answer(self.connection.getsockname()[0]) if self.path == acknowledgement.PATH else None
            self.send_response(200 if body is not None else 503)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per ask would be most of this process's work

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kubeconfig", type=Path)
    ap.add_argument("--port", type=int, default=objects.ADMIN_PORT)
    args = ap.parse_args(argv)
    served = Served()
    for path, params, on_event in (
        ("/api/v1/secrets", CONFIG_SECRETS, served.secret),
        ("/api/v1/pods", GATEWAY_PODS, served.pod),
    ):
        threading.Thread(target=follow, args=(args.kubeconfig, path, params, on_event), daemon=True).start()
    # Every address: the kwok pods' are all of 127.245.0.0/16 (a socket bound to one address takes only that one).
    server = ThreadingHTTPServer(("0.0.0.0", args.port), handler(served))
    server.daemon_threads = True
    print(f"answering for kwok's gateway pods on port {args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
