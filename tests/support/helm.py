"""What the NATS Helm chart (nats/nats) makes of deploy/helm/nats-values.yaml, for the tests that
check it without Helm: the `cluster` block of nats.conf as the chart writes it (its template
files/config/cluster.yaml, then `merge` and `patch`, then `<< X >>` unquoted), and who a set of
NetworkPolicies lets reach a pod's port (the Kubernetes semantics: a pod no Ingress policy
selects accepts everyone; a selected one, what one of its policies admits)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "nats-values.yaml"
RELEASE = "nats"
"""The release (and StatefulSet) name of docs/operations/deploy.md; the headless Service is
`<release>-headless`."""
NAMESPACE = "nats"
CHART_DEFAULTS = {
    "port": 6222,
    "noAdvertise": True,
    "routeURLs": {"useFQDN": False, "k8sClusterDomain": "cluster.local"},
    "tls": {"enabled": False, "dir": "/etc/nats-certs/cluster", "cert": "tls.crt", "key": "tls.key"},
}
TLS_CA_DIR = "/etc/nats-ca-cert"
"""The chart's default `tlsCA.dir`."""


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(VALUES.read_text())
    return loaded


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _patched(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON Patch `add`, `replace` and `remove` on object members and list items."""
    doc = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "remove":
                node.pop(index)
            elif op["op"] == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            else:
                node[index] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[last]
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and last not in node:
                raise KeyError(f"replace of a missing member {op['path']}")
            node[last] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"op {op['op']} is not handled here")
    return doc


def cluster_block(chart_values: dict[str, Any] | None = None) -> dict[str, Any]:
    """nats.conf's `cluster` as the chart writes it from `config.cluster` (and `tlsCA`)."""
    v = chart_values or values()
    c = _merged(CHART_DEFAULTS, v["config"]["cluster"])
    port = int(c["port"])
    tls = c["tls"]
    auth = ""
    urls = c["routeURLs"]
    if urls.get("user") and urls.get("password"):
        auth = f"{urls['user']}:{urls['password']}@"
    domain = f"{RELEASE}-headless"
    if urls.get("useFQDN"):
        domain = f"{domain}.{NAMESPACE}.svc.{urls.get('k8sClusterDomain', 'cluster.local')}"
    proto = "tls" if tls.get("enabled") else "nats"
    doc: dict[str, Any] = {
        "name": RELEASE,
        "port": port,
        "no_advertise": c["noAdvertise"],
        "routes": [f"{proto}://{auth}{RELEASE}-{i}.{domain}:{port}" for i in range(int(c["replicas"]))],
    }
    if urls.get("user") and urls.get("password"):
        doc["authorization"] = {"user": urls["user"], "password": urls["password"]}
    if tls.get("enabled"):
        block: dict[str, Any] = {}
        if tls.get("secretName"):
            block["cert_file"] = f"{tls['dir'].rstrip('/')}/{tls.get('cert') or 'tls.crt'}"
            block["key_file"] = f"{tls['dir'].rstrip('/')}/{tls.get('key') or 'tls.key'}"
        ca = v.get("tlsCA", {})
        if ca.get("enabled") and (ca.get("secretName") or ca.get("configMapName")):
            block["ca_file"] = f"{ca.get('dir', TLS_CA_DIR).rstrip('/')}/{ca.get('key') or 'ca.crt'}"
        doc["tls"] = _patched(_merged(block, tls.get("merge") or {}), tls.get("patch") or [])
    return _patched(_merged(doc, c.get("merge") or {}), c.get("patch") or [])


def nats_conf(block: dict[str, Any]) -> str:
    """A block as the chart formats nats.conf: JSON, with `"<< X >>"` written as X."""
    return re.sub(r'"<<\s+(.*?)\s+>>"', r"\1", json.dumps(block, indent=2))


# ---- NetworkPolicies ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def namespace_with_name(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector {selector} is not handled here")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict[str, Any], policy_namespace: str, source: Pod) -> bool:
    if set(peer) - {"podSelector", "namespaceSelector"}:
        raise ValueError(f"peer {peer} is not handled here")
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], source.namespace_with_name()):
            return False
    elif source.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or _selects(peer["podSelector"], source.labels)


def admits(policies: list[dict[str, Any]], target: Pod, port: int, source: Pod) -> bool:
    """Whether `source` may open a TCP connection to `target` on `port`."""
    selecting = [
        p
        for p in policies
        if p["kind"] == "NetworkPolicy"
        and p["metadata"].get("namespace", target.namespace) == target.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        namespace = policy["metadata"].get("namespace", target.namespace)
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports is not None and not any(
                p.get("protocol", "TCP") == "TCP" and int(p["port"]) == port for p in ports
            ):
                continue
            peers = rule.get("from")
            if peers is None or any(_peer_matches(peer, namespace, source) for peer in peers):
                return True
    return False
