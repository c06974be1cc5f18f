"""The NATS bus the gateway replicas of one namespace share, and the server the operator runs for it. Pure.

Only a namespace whose gateway runs more than one replica gets a bus (`wiring`). Its configuration names the bus
credentials as `${env.NAME}` (the gateway resolves those in `gateway.bus`) and its pods get them from a Secret, so
a configuration Secret never holds one. Two modes (`settings.BusSettings`):

- `managed`: one NATS server (JetStream) in the operator's namespace serves every gateway namespace, each in its
  own NATS account. Accounts isolate subjects and JetStream entirely, so one tenant can neither read nor inject
  another's fires or key-value entries. A namespace's password is derived from a key only the operator holds
  (`account_password`), so no tenant can choose one: its `mcpg-gateway-bus` Secret is only the pods' copy, put
  back if anyone edits it. The server's configuration lists an account for each namespace the operator serves
  (`nats_config`), never for a Secret someone wrote, and is bounded in size (`fitting`).
- `external`: the user's server, with the credentials Secret the user puts in each namespace. The subjects and
  the bucket then carry the namespace, so that a shared account does not mix namespaces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpg_operator import objects
from mcpg_operator.settings import BusSettings

NAME = "mcpg-bus"
"""The managed server's Deployment and Service."""
CONFIG_SECRET, CONFIG_KEY = "mcpg-bus-config", "nats.conf"
CREDENTIALS_SECRET = "mcpg-gateway-bus"  # noqa: S105 - a Secret name, not a password
"""In each gateway namespace (managed mode): the namespace's account user and password, keys `user`, `password`."""
USER_KEY, PASSWORD_KEY = "user", "password"
CREDENTIALS_LABEL = "mcpg.dev/bus-credentials"
URL_ENV, USER_ENV, PASSWORD_ENV = "MCPG_BUS_URL", "MCPG_BUS_USER", "MCPG_BUS_PASSWORD"
DIGEST_ENV = "MCPG_BUS_CREDENTIALS_DIGEST"
"""Managed: a digest of the password, so the pod template changes with it (the others read it at start only)."""
CLIENT_PORT, MONITOR_PORT = 4222, 8222
CONFIG_DIR, DATA_DIR, RUN_DIR = "/etc/nats", "/data", "/var/run/nats"
PID_FILE = f"{RUN_DIR}/nats.pid"
RELOAD_EVERY_S = 2
"""How often the reloader compares the mounted configuration with the one the server last loaded."""
RELOADER = """\
# Reload nats-server when its mounted configuration changes: the kubelet rewrites a Secret volume in place.
# On start it reloads once as well, in case the file changed before this container began watching it.
trap 'exit 0' TERM
config="$1" pid_file="$2" applied=""
while true; do
  current="$(sha256sum < "$config")"
  if [ "$current" != "$applied" ] && [ -s "$pid_file" ] && nats-server --signal "reload=$pid_file"; then
    echo "config-reloader: nats-server reloaded $config"  # no digest: the file holds every password
    applied="$current"
  fi
  sleep "$3"
done
"""
"""The sidecar's program, for the image's busybox `sh`: no second image to trust, pin and pull."""
SELECTOR = {"app.kubernetes.io/name": NAME}
LABELS = {**objects.MANAGED, **SELECTOR}
SHARED = "mcpg"
"""Subject prefix and bucket in a namespace's own account: nothing else lives there."""
ACCOUNT_JETSTREAM_LIMITS = "{max_mem: 16MB, max_file: 64MB, max_streams: 8, max_consumers: 64}"
"""Each namespace's share of the one server: a gateway needs two small key-value buckets (one entry per watched
URI in each), so these leave room to spare while no tenant can fill the server's store for the others."""
BUCKET_MAX = 64
"""The gateway's limit on a bucket name."""

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PASSWORD = re.compile(r"[A-Za-z0-9_-]{16,128}")
"""URL-safe tokens, as derived: nothing that could end a quoted string in nats.conf or start a `$` variable."""
KEY_SECRET, KEY_KEY = "mcpg-bus-key", "key"
"""In the bus namespace: the key every namespace's password is derived from. Tenants cannot read or write it."""
KEY_BYTES = 32
MAX_CONFIG_BYTES = 512 * 1024
"""nats.conf's bound: a Secret holds at most 1 MiB, its data base64-encoded (4/3), beside its metadata. Each
account takes about 300 bytes, so this is room for about 1,700 gateway namespaces."""


@dataclass(frozen=True, slots=True)
class Wiring:
    """How one namespace's gateways reach the bus."""

    url: str
    """A plain URL, no credentials: the pods get it as an environment variable."""
    credentials: str
    """The Secret in the namespace holding `user` and `password`."""
    subject_prefix: str
    bucket: str
    managed: bool
    """The operator generates the credentials Secret and runs the server."""
    password: str | None = None
    """Managed: the namespace's account password (`account_password`), once the pass has derived it."""


def wiring(bus: BusSettings | None, namespace: str, replicas: int) -> Wiring | None:
    """The bus of `namespace`'s gateway; None when it runs alone (one replica, or no bus set up at all)."""
    if bus is None or replicas <= 1:
        return None
    if bus.mode == "managed":
        return Wiring(managed_url(bus.namespace), CREDENTIALS_SECRET, SHARED, SHARED, managed=True)
    return Wiring(bus.url, bus.credentials_secret, f"{SHARED}.{namespace}", external_bucket(namespace), managed=False)


def runs_server(bus: BusSettings, replicas: int) -> bool:
    """Whether the operator runs the managed server: managed mode and gateway replicas above 1. Otherwise a
    server it ran before is left over, and removed (`bus_reconcile.leftovers`)."""
    return bus.mode == "managed" and replicas > 1


def managed_url(bus_namespace: str) -> str:
    return f"nats://{NAME}.{bus_namespace}.svc:{CLIENT_PORT}"


def external_bucket(namespace: str) -> str:
    """`mcpg-<namespace>`; a namespace too long for the gateway's limit is cut and a digest of it appended."""
    bucket = f"{SHARED}-{namespace}"
    if len(bucket) <= BUCKET_MAX:
        return bucket
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:16]
    return f"{bucket[: BUCKET_MAX - len(digest) - 1]}-{digest}"


def account_password(key: bytes, namespace: str) -> str:
    """A gateway namespace's account password: HMAC-SHA256 of its name under the operator's key, URL-safe.

    Derived, not stored: the server's accounts and each namespace's Secret agree without either being read
    back from where a tenant could write, and an operator restarted elsewhere derives the same.
    """
    digest = hmac.new(key, namespace.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def credentials_digest(password: str) -> str:
    """A short digest of a password, for the pod template: a new password rolls the pods that read it at start."""
    return hashlib.sha256(password.encode()).hexdigest()[:16]


def account_user(namespace: str) -> str:
    """The NATS account of a gateway namespace (managed mode), and the one user in it."""
    return f"{SHARED}-{namespace}"


# --- a gateway namespace -------------------------------------------------------------------------------------


def gateway_block(w: Wiring) -> dict[str, Any]:
    """`gateway.bus` as rendered: the URL and credentials are the pod's environment, never the Secret's text."""
    refs = {"url": URL_ENV, "user": USER_ENV, "password": PASSWORD_ENV}
    return {**{k: f"${{env.{var}}}" for k, var in refs.items()}, **_naming(w)}


def checked_block(w: Wiring) -> dict[str, Any]:
    """`gateway.bus` as the operator asks the gateway's start-up check about it: stand-ins for the credentials.

    The check runs with an empty environment on purpose (a watch entry naming any variable is refused, so no
    entry can read the bus password from the pod's environment), so the bus block is resolved here instead.
    """
    return {"url": w.url, "user": "checked", "password": "checked", **_naming(w)}


def _naming(w: Wiring) -> dict[str, str]:
    return {"subject_prefix": w.subject_prefix, "bucket": w.bucket}


def pod_env(w: Wiring | None) -> list[dict[str, Any]]:
    """The gateway container's environment for the bus: URL, credentials from the Secret (its instance name is the
    pod's, `POD_NAME`, which every gateway container has: `objects`)."""
    if w is None:
        return []

    def key(name: str) -> dict[str, Any]:
        return {"secretKeyRef": {"name": w.credentials, "key": name}}

    digest = [{"name": DIGEST_ENV, "value": credentials_digest(w.password)}] if w.password else []
    return [
        {"name": URL_ENV, "value": w.url},
        {"name": USER_ENV, "valueFrom": key(USER_KEY)},
        {"name": PASSWORD_ENV, "valueFrom": key(PASSWORD_KEY)},
        *digest,
    ]


def credentials_secret(namespace: str, password: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    """A namespace's account credentials (managed mode); owned like its gateway, so it goes with the last watch."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": CREDENTIALS_SECRET,
            "namespace": namespace,
            # Watched: an edit of the pods' copy is seen at once, and put back.
            "labels": {**objects.MANAGED, **objects.SELECTOR, CREDENTIALS_LABEL: "true", objects.WATCHED_LABEL: "true"},
            "ownerReferences": owners,
        },
        "type": "Opaque",
        "data": {USER_KEY: _b64(account_user(namespace)), PASSWORD_KEY: _b64(password)},
    }


# --- the managed server --------------------------------------------------------------------------------------


def usable_password(password: str | None) -> bool:
    """Whether a password can be written into nats.conf as it is (what the operator generates always can)."""
    return password is not None and _PASSWORD.fullmatch(password) is not None


def fitting(passwords: Mapping[str, str], present: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """The accounts that fit in `MAX_CONFIG_BYTES`, and the namespaces left out. Pure.

    Those the live configuration already lists (`present`) come first, so a namespace that joins when the
    configuration is full waits, and nobody already on the bus is dropped for it.
    """
    kept: dict[str, str] = {}
    size = empty = len(nats_config({}))
    for namespace in sorted(passwords, key=lambda ns: (ns not in present, ns)):
        password = passwords[namespace]
        if not (_NAMESPACE.fullmatch(namespace) and usable_password(password)):
            continue  # never derived so: left out alone, and the others are rendered
        entry = len(nats_config({namespace: password})) - empty
        if size + entry > MAX_CONFIG_BYTES:
            continue
        kept[namespace], size = password, size + entry
    return kept, sorted(set(passwords) - set(kept))


def listed_accounts(config: str) -> frozenset[str]:
    """The gateway namespaces a rendered nats.conf holds an account for (`nats_config`'s own format)."""
    return frozenset(re.findall(rf'^  "{SHARED}-([a-z0-9-]+)": \{{$', config, re.MULTILINE))


def nats_config(passwords: Mapping[str, str]) -> str:
    """nats.conf for the managed server: an account, JetStream enabled, for each gateway namespace -> password.

    Ports, the store directory and JetStream itself are command-line arguments (`server_args`), not set here.
    Values are written in double quotes and only accepted from a safe alphabet, so no namespace or password can
    end its string and add configuration. Without any account the server would let anyone in: never run it so.
    """
    lines = [
        "# Rendered by mcpg-operator from the gateway namespaces' bus Secrets; any edit is overwritten.",
        "# One account per gateway namespace: accounts isolate subjects and JetStream entirely.",
        "accounts {",
    ]
    for namespace in sorted(passwords):
        user, password = _quoted_account(namespace, passwords[namespace])
        lines += [
            f"  {user}: {{",
            f"    jetstream: {ACCOUNT_JETSTREAM_LIMITS}",
            f"    users: [{{user: {user}, password: {password}}}]",
            "  }",
        ]
    return "\n".join([*lines, "}", ""])


def _quoted_account(namespace: str, password: str) -> tuple[str, str]:
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"not a namespace name: {namespace[:80]!r}")
    if not usable_password(password):
        raise ValueError(f"the bus password of namespace {namespace} is not a URL-safe token (not shown)")
    return f'"{account_user(namespace)}"', f'"{password}"'


def server_args() -> list[str]:
    # As arguments, not in nats.conf: what the server listens on and reads is visible in the pod spec.
    return [
        "--config",
        f"{CONFIG_DIR}/{CONFIG_KEY}",
        "--pid",
        PID_FILE,
        "--jetstream",
        "--store_dir",
        f"{DATA_DIR}/jetstream",
        "--port",
        str(CLIENT_PORT),
        "--http_port",
        str(MONITOR_PORT),
    ]


def managed_objects(namespace: str, image: str, passwords: Mapping[str, str]) -> list[dict[str, Any]]:
    """The managed server in `namespace`: its configuration Secret, Service and Deployment, in that order."""
    return [_config_secret(namespace, nats_config(passwords)), _service(namespace), _deployment(namespace, image)]


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


def _config_secret(namespace: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(CONFIG_SECRET, namespace),
        "type": "Opaque",
        "data": {CONFIG_KEY: _b64(text)},
    }


def _service(namespace: str) -> dict[str, Any]:
    port = {"name": "client", "port": CLIENT_PORT, "targetPort": "client", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(NAME, namespace),
        "spec": {"type": "ClusterIP", "selector": dict(SELECTOR), "ports": [port]},
    }


def _deployment(namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME, namespace),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": dict(SELECTOR)},
            # The new server is Ready before the old one stops, so a gateway's reconnect (1 s) finds a server at
            # once and a webhook waiting for it is still answered 200; with Recreate, every namespace's webhooks
            # were refused for the seconds the new pod took to start, each time a namespace gained an account.
            # While both run, the gateways connected to each hear only their own server's fires, and each
            # server's key-value store is its own; both heal by the rule for any reconnect (every held URI is
            # told once, pull watches elect their owners again).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            # No configuration hash on the template: a namespace gaining or losing its account is a reload of
            # the running server (`_reloader`), not a new server. Rolling one cost every namespace a reconnect,
            # a fire of every URI it held and its key-value state, each time any namespace came or went.
            "template": {"metadata": {"labels": dict(LABELS)}, "spec": _pod(image)},
        },
    }


def _pod(image: str) -> dict[str, Any]:
    return {
        "automountServiceAccountToken": False,
        "securityContext": objects.pod_security(),
        "shareProcessNamespace": True,  # the reloader signals the server; same user, no capability needed
        "containers": [_container(image), _reloader(image)],
        "volumes": [
            {"name": "config", "secret": {"secretName": CONFIG_SECRET, "defaultMode": 0o440}},
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "data", "emptyDir": {}},
        ],
    }


def _container(image: str) -> dict[str, Any]:
    ports: Sequence[tuple[str, int]] = (("client", CLIENT_PORT), ("monitor", MONITOR_PORT))
    # Ready once JetStream is: the gateways need its key-value store, not just the subjects.
    ready = {"path": "/healthz?js-enabled-only=true", "port": MONITOR_PORT}
    return {
        "name": "nats",
        "image": image,
        "command": ["nats-server"],
        "args": server_args(),
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in ports],
        "readinessProbe": {"httpGet": ready, "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": objects.container_security(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
            {"name": "data", "mountPath": DATA_DIR},
        ],
    }


def _reloader(image: str) -> dict[str, Any]:
    """The sidecar that reloads the server when the kubelet updates its mounted configuration.

    nats-server applies new and removed accounts on a reload without dropping the other accounts' connections
    or JetStream state. The kubelet refreshes a Secret volume within its sync period (about a minute), so a
    new namespace's gateways may wait that long for their account; nobody else notices.
    """
    return {
        "name": "config-reloader",
        "image": image,
        # Paths as arguments, not inside the script: the script stays one constant, whatever the mounts.
        "command": ["sh", "-c", RELOADER, "config-reloader", *_reloader_args()],
        "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": objects.container_security(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR, "readOnly": True},
        ],
    }


def _reloader_args() -> list[str]:
    """`$1`, `$2`, `$3` of the reloader's script: what to watch, whom to signal, how often to look."""
    return [f"{CONFIG_DIR}/{CONFIG_KEY}", PID_FILE, str(RELOAD_EVERY_S)]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
