"""What a container of a pod runs as a local process: pure builders over the pod as the API server stores it.

The local kubelet (`kubelet.py`) turns a pod into a `Launch`: the argv, the environment and the files of its
volumes. Nothing here reads the cluster; Secrets and ConfigMaps come in through a `Lookup`, Services through a
`Services`, so every rule is unit-testable. The files of one Secret or ConfigMap volume on their own
(`projecting`, `volume_files`) are what the kubelet rewrites in a running pod when that object changes.

Three mappings make a pod runnable beside others on one machine, and all are applied the same way to the
container's command, args and env values (each value or argument on its own), never to the pod as the operator
rendered it:

- **Service names** (cluster DNS). Every `<service>.<namespace>.svc:<port>` in the text (also spelled
  `.svc.cluster.local`, with or without the trailing dot, in any letter case; inside a URL such as
  `nats://user:pw@mcpg-bus.mcpg-system.svc:4222` too) becomes `127.0.0.1:<stand-in port>`: the loopback
  listener of the Service stand-in (`serviceproxy`) for that Service port (the Service's `port`, not its
  targetPort). Not mapped: a name without a port (nothing says which listener), the short forms `<service>`
  and `<service>.<namespace>` (search-path lookups, ambiguous with any `host.tld:port`), pod names under a
  headless Service, and other cluster domains. A Service that does not exist yet, or has no such port, is a
  `ConfigError` naming the address: the kubelet reports CreateContainerConfigError and builds the launch
  again on its next try, so a pod created before its Service starts once the Service exists (a real pod
  would start and see NXDOMAIN until then; waiting is the same outcome without a program's retry policy).
  The mapping is made at each start of the container: a Service recreated later (a new stand-in port, as a
  new ClusterIP) is seen at the next restart.
- **Mount paths.** Each volumeMount's `mountPath` becomes the pod's directory for that volume: an argument or
  value equal to the mount path, or starting with it followed by `/`, has that prefix replaced. A program that
  reads a path not under any mount (a wrong mount path in the manifest) finds nothing there, as in a container.
- **Ports.** Each declared `containerPort` gets a free loopback port: an argument or value that is exactly the
  port number, or ends in `:<port>` or `=<port>`, gets the host port instead. Probes and the Service stand-in
  resolve ports (by name or number) through the same table.

A text the Service-name mapping changed is left alone by the other two: its port is the stand-in's now, and a
pod that names its own Service (`nats://mcpg-bus.ns.svc:4222` in a pod declaring 4222) must reach the Service,
not have the port of the name rewritten to its own. Files inside volumes are never mapped: a program whose
config file names a port or a path must be given it as a flag (nats-server's flags override its file).

What a container runtime would add that the programs here do not need is left out on purpose: service links
(`*_SERVICE_HOST`), user and security-context enforcement, resource limits, and network namespaces.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Lookup = Callable[[str, str], dict[str, Any] | None]
"""(kind "Secret" | "ConfigMap", name) in the pod's namespace -> the object, or None if it does not exist."""
Services = Callable[[str, str], Mapping[int, int] | None]
"""(namespace, Service name) -> its port -> the stand-in's loopback port, or None if no such Service is served."""
LOOPBACK = "127.0.0.1"


class ConfigError(Exception):
    """The container cannot be started as written (kubelet's CreateContainerConfigError); the message says why."""


@dataclass(frozen=True, slots=True)
class Launch:
    """One container, ready to exec: argv (image entrypoint resolved by the caller), env, files, ports."""

    command: list[str]
    """The container's command and args after both mappings; the caller prefixes the image's entrypoint if the
    container sets no `command`."""
    uses_image_entrypoint: bool
    env: dict[str, str]
    files: dict[Path, tuple[bytes, int]] = field(default_factory=dict)
    """Path (under the pod directory) -> (content, mode) for every file of every volume."""
    dirs: list[Path] = field(default_factory=list)
    ports: dict[int, int] = field(default_factory=dict)
    """containerPort -> host port."""
    named_ports: dict[str, int] = field(default_factory=dict)
    """Port name -> containerPort."""
    services: dict[str, str] = field(default_factory=dict)
    """Each Service address as written (`mcpg-bus.ns.svc:4222`) -> the loopback address it was given."""


def container(pod: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    """The named container of `pod`, or its first."""
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == name), containers[0]) if name else containers[0]


def no_services(namespace: str, name: str) -> Mapping[int, int] | None:
    """A cluster without Services."""
    return None


def build(
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    pod_dir: Path,
    host_ports: Mapping[int, int],
    lookup: Lookup,
    image_cmd: list[str],
    services: Services = no_services,
) -> Launch:
    """The `Launch` of container `spec` of `pod`; raise ConfigError naming what is missing or unsupported."""
    mounts = _mounts(pod, spec, pod_dir)
    declared = {int(p["containerPort"]): p.get("name") for p in spec.get("ports", [])}
    ports = {port: host_ports[port] for port in declared}
    addresses: dict[str, str] = {}

    def mapped(text: str, where: str) -> str:
        try:
            found = service_addresses(text, services)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        addresses.update(found)
        return replace_addresses(text, found) if found else map_ports(map_paths(text, mounts), ports)

    env = {"HOSTNAME": pod["metadata"]["name"]}  # as a container runtime sets it: the pod's name
    env |= _env_from(spec, lookup)
    env |= {k: mapped(v, f"env {k}") for k, v in _env(pod, spec, lookup).items()}
    uses_entrypoint = "command" not in spec
    args = spec.get("args", image_cmd if uses_entrypoint else [])
    # an argument is named by its index: its text may hold a credential (a URL's password)
    command = [mapped(a, f"argv[{i}]") for i, a in enumerate([*spec.get("command", []), *args])]
    files, dirs = _volume_files(pod, spec, pod_dir, lookup)
    named = {n: port for port, n in declared.items() if n}
    return Launch(command, uses_entrypoint, env, files, dirs, ports, named, addresses)


_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
SERVICE_ADDRESS = re.compile(
    rf"(?<![-a-z0-9.])(?P<service>{_LABEL})\.(?P<namespace>{_LABEL})"
    rf"\.svc(?:\.cluster\.local)?\.?:(?P<port>\d{{1,5}})(?!\d)",
    re.IGNORECASE | re.ASCII,  # DNS folds ASCII case only: no Kelvin sign for a `k`
)
"""`<service>.<namespace>.svc[.cluster.local][.]:<port>`, not preceded by a DNS name's letters or dots."""


def service_addresses(text: str, services: Services) -> dict[str, str]:
    """Each Service address in `text` -> `127.0.0.1:<stand-in port>`; ConfigError for an unknown Service or port."""
    found: dict[str, str] = {}
    for match in SERVICE_ADDRESS.finditer(text):
        name, namespace, port = match["service"].lower(), match["namespace"].lower(), int(match["port"])
        table = services(namespace, name)
        if table is None:
            raise ConfigError(f"{match[0]}: no Service {name!r} in namespace {namespace!r} (cluster DNS: NXDOMAIN)")
        if port not in table:
            raise ConfigError(f"{match[0]}: Service {namespace}/{name} has no port {port} (it has {sorted(table)})")
        found[match[0]] = f"{LOOPBACK}:{table[port]}"
    return found


def replace_addresses(text: str, addresses: Mapping[str, str]) -> str:
    """`text` with each Service address found by `service_addresses` replaced by its loopback address."""
    return SERVICE_ADDRESS.sub(lambda m: addresses.get(m[0], m[0]), text)


def map_services(text: str, services: Services) -> str:
    """`text` with every Service address made the stand-in's loopback address (see the module's rules)."""
    return replace_addresses(text, service_addresses(text, services))


def map_paths(text: str, mounts: Mapping[str, Path]) -> str:
    """`text` with the longest mount path it starts with replaced by that volume's directory."""
    for mount in sorted(mounts, key=len, reverse=True):
        if text == mount or text.startswith(mount.rstrip("/") + "/"):
            return str(mounts[mount]) + text[len(mount.rstrip("/")) :]
    return text


_PORT = re.compile(r"^(?P<head>.*[:=])?(?P<port>\d+)$")


def map_ports(text: str, ports: Mapping[int, int]) -> str:
    """`text` with a declared containerPort (the whole text, or after its last `:` or `=`) made the host port."""
    match = _PORT.match(text)
    if match is None or int(match["port"]) not in ports:
        return text
    return f"{match['head'] or ''}{ports[int(match['port'])]}"


def resolve_port(port: int | str, launch: Launch) -> int:
    """A probe's or Service's target port (a containerPort number or a port name) -> the host port."""
    number = launch.named_ports.get(port) if isinstance(port, str) and not port.isdigit() else int(port)
    if number is None or number not in launch.ports:
        raise ConfigError(f"port {port!r} is not a declared containerPort of the container")
    return launch.ports[number]


def _mounts(pod: Mapping[str, Any], spec: Mapping[str, Any], pod_dir: Path) -> dict[str, Path]:
    volumes = {v["name"] for v in pod["spec"].get("volumes", [])}
    mounts = {}
    for mount in spec.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise ConfigError(f"volumeMount {mount['name']!r} names no volume of the pod")
        target = volume_dir(pod_dir, mount["name"])
        mounts[mount["mountPath"]] = target / mount["subPath"] if mount.get("subPath") else target
    return mounts


def volume_dir(pod_dir: Path, volume: str) -> Path:
    return pod_dir / "volumes" / volume


def _env(pod: Mapping[str, Any], spec: Mapping[str, Any], lookup: Lookup) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in spec.get("env", []):
        if "valueFrom" not in var:
            env[var["name"]] = _expand(var.get("value", ""), env)
            continue
        value = _value_from(pod, var["name"], var["valueFrom"], lookup)
        if value is not None:
            env[var["name"]] = value
    return env


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` references to variables defined earlier; `$$` escapes."""
    return re.sub(r"\$\$|\$\((\w+)\)", lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), value)


def _value_from(pod: Mapping[str, Any], name: str, source: Mapping[str, Any], lookup: Lookup) -> str | None:
    if "fieldRef" in source:
        return field_ref(pod, source["fieldRef"]["fieldPath"])
    for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
        if key in source:
            ref = source[key]
            return _key(kind, lookup(kind, ref["name"]), ref["name"], ref["key"], bool(ref.get("optional")), name)
    raise ConfigError(f"env {name}: valueFrom {sorted(source)} is not supported by the local kubelet")


def _key(kind: str, obj: dict[str, Any] | None, ref: str, key: str, optional: bool, var: str) -> str | None:
    data = _data(kind, obj)
    if key in data:
        return data[key].decode()
    if optional:
        return None
    what = f"{kind.lower()} {ref!r} not found" if obj is None else f"key {key!r} not found in {kind.lower()} {ref!r}"
    raise ConfigError(f"env {var}: {what}")


def _data(kind: str, obj: Mapping[str, Any] | None) -> dict[str, bytes]:
    if obj is None:
        return {}
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return {k: v.encode() for k, v in (obj.get("data") or {}).items()}


FIELDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda p: str(p["metadata"]["name"]),
    "metadata.namespace": lambda p: str(p["metadata"]["namespace"]),
    "metadata.uid": lambda p: str(p["metadata"]["uid"]),
    "spec.nodeName": lambda p: str(p["spec"].get("nodeName", "")),
    "spec.serviceAccountName": lambda p: str(p["spec"].get("serviceAccountName", "default")),
    "status.podIP": lambda p: str(p.get("status", {}).get("podIP", "")),
    "status.hostIP": lambda p: str(p.get("status", {}).get("hostIP", "")),
}


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    """The downward API's fieldRef paths a kubelet supports for env."""
    labels = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if labels:
        return str(pod["metadata"].get(labels[1], {}).get(labels[2], ""))
    if path not in FIELDS:
        raise ConfigError(f"fieldRef {path!r} is not supported by the local kubelet")
    return FIELDS[path](pod)


def _env_from(spec: Mapping[str, Any], lookup: Lookup) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        kind, ref = ("Secret", source["secretRef"]) if "secretRef" in source else ("ConfigMap", source["configMapRef"])
        obj = lookup(kind, ref["name"])
        if obj is None and not ref.get("optional"):
            raise ConfigError(f"envFrom: {kind.lower()} {ref['name']!r} not found")
        env |= {source.get("prefix", "") + k: v.decode() for k, v in _data(kind, obj).items()}
    return env


def _volume_files(
    pod: Mapping[str, Any], spec: Mapping[str, Any], pod_dir: Path, lookup: Lookup
) -> tuple[dict[Path, tuple[bytes, int]], list[Path]]:
    """Every mounted volume's files: Secret and ConfigMap keys (or `items`), and emptyDir directories."""
    mounted = {m["name"] for m in spec.get("volumeMounts", [])}
    files: dict[Path, tuple[bytes, int]] = {}
    dirs: list[Path] = []
    for volume in pod["spec"].get("volumes", []):
        if volume["name"] not in mounted:
            continue
        target = volume_dir(pod_dir, volume["name"])
        dirs.append(target)
        if "emptyDir" not in volume:
            files |= _projected_files(volume, target, lookup)
    return files, dirs


def projecting(pod: Mapping[str, Any], kind: str, name: str) -> list[str]:
    """The pod's volumes that project Secret or ConfigMap (`kind`) `name` and that a container mounts: what a
    kubelet rewrites when that object changes."""
    mounted = {m["name"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])}
    found = []
    for volume in pod["spec"].get("volumes", []):
        if volume["name"] in mounted and ("secret" in volume or "configMap" in volume):
            source_kind, source, name_key = _volume_source(volume)
            if (source_kind, source[name_key]) == (kind, name):
                found.append(volume["name"])
    return found


def volume_files(pod: Mapping[str, Any], volume: str, pod_dir: Path, lookup: Lookup) -> dict[Path, tuple[bytes, int]]:
    """The files of the pod's Secret or ConfigMap volume named `volume` as `lookup` finds its object now: what
    `build` writes for it; ConfigError as `build` raises it (a key its `items` names is gone, say)."""
    [spec] = [v for v in pod["spec"].get("volumes", []) if v["name"] == volume]
    return _projected_files(spec, volume_dir(pod_dir, volume), lookup)


def _projected_files(volume: Mapping[str, Any], target: Path, lookup: Lookup) -> dict[Path, tuple[bytes, int]]:
    """A Secret or ConfigMap volume's files under `target`: every key, or its `items`, with their modes."""
    kind, source, name_key = _volume_source(volume)
    obj = lookup(kind, source[name_key])
    if obj is None and not source.get("optional"):
        raise ConfigError(f"volume {volume['name']!r}: {kind.lower()} {source[name_key]!r} not found")
    data = _data(kind, obj)
    mode = int(source.get("defaultMode", 0o644))
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    files: dict[Path, tuple[bytes, int]] = {}
    for item in items:
        if item["key"] not in data:
            raise ConfigError(f"volume {volume['name']!r}: key {item['key']!r} not found")
        files[target / item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
    return files


def _volume_source(volume: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], str]:
    if "secret" in volume:
        return "Secret", volume["secret"], "secretName"
    if "configMap" in volume:
        return "ConfigMap", volume["configMap"], "name"
    kinds = sorted(set(volume) - {"name"})
    raise ConfigError(f"volume {volume['name']!r}: {kinds} volumes are not supported by the local kubelet")


def references(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> set[tuple[str, str]]:
    """Every (kind, name) of Secret and ConfigMap that `build` may look up for container `spec`."""
    refs: set[tuple[str, str]] = set()
    for var in spec.get("env", []):
        source = var.get("valueFrom", {})
        for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            if key in source:
                refs.add((kind, source[key]["name"]))
    for source in spec.get("envFrom", []):
        if "secretRef" in source:
            refs.add(("Secret", source["secretRef"]["name"]))
        elif "configMapRef" in source:
            refs.add(("ConfigMap", source["configMapRef"]["name"]))
    for volume in pod["spec"].get("volumes", []):
        if "secret" in volume:
            refs.add(("Secret", volume["secret"]["secretName"]))
        elif "configMap" in volume:
            refs.add(("ConfigMap", volume["configMap"]["name"]))
    return refs
