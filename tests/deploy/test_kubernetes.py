"""Every manifest of every overlay, rendered with kustomize, validates against the Kubernetes
JSON schemas (kubernetes-validate, offline) or, for CRDs, against tests/deploy/schemas; and the
rendered objects keep the properties the deployment relies on."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.platform.config import NATS_PASSWORD_VARIABLES
from tests.deploy.conftest import KUSTOMIZE_DIR, OVERLAYS, SERVICES, by_kind, render

try:
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError
except ModuleNotFoundError:  # pragma: no cover - reported as a failure below
    kubernetes_validate = None

KUBERNETES_VERSION = "1.30.0"
SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1.json",
    ("cert-manager.io/v1", "Certificate"): "certificate-cert-manager.io-v1.json",
    ("cert-manager.io/v1", "ClusterIssuer"): "clusterissuer-cert-manager.io-v1.json",
}
EXAMPLES = KUSTOMIZE_DIR / "examples"
NOT_SECRET = {
    # The console's settings that share its Secret but are not secret (docs/console.md).
    "CONTINUITY_CONSOLE_IDENTITY_HEADER",
    "CONTINUITY_CONSOLE_TRUSTED_PROXIES",
    "CONTINUITY_CONSOLE_FORWARDED_HOPS",
    "CONTINUITY_CONSOLE_ORIGIN",
}


def unhashed(name: str) -> str:
    """A generated ConfigMap or Secret name without kustomize's content-hash suffix."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def validate(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        schema = json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
        return
    if kubernetes_validate is None:
        pytest.fail("kubernetes-validate is not installed: pip install kubernetes-validate", pytrace=False)
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except SchemaNotFoundError as err:
        pytest.fail(f"no schema for {key}: add one under tests/deploy/schemas ({err.message})")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_manifest_validates(overlay: str) -> None:
    docs = render(overlay)
    assert docs, f"overlay {overlay} rendered nothing"
    for doc in docs:
        try:
            validate(doc)
        except jsonschema.ValidationError as err:
            where = f"{doc['kind']}/{doc['metadata']['name']}"
            pytest.fail(f"{overlay}: {where}: {err.message} at {list(err.path)}")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, path
    for doc in docs:
        try:
            validate(doc)
        except jsonschema.ValidationError as err:
            pytest.fail(
                f"{path.name}: {doc['kind']}/{doc['metadata']['name']}: {err.message} at {list(err.path)}"
            )


def test_example_secrets_hold_placeholders_only() -> None:
    text = (EXAMPLES / "secrets.example.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    names = {d["metadata"]["name"] for d in docs}
    assert names == {
        "continuity-runner-keys",
        "continuity-nats",
        "continuity-redis",
        "continuity-console",
        "continuity-console-proxy",
    }
    keys = next(d for d in docs if d["metadata"]["name"] == "continuity-runner-keys")
    for entry in keys["stringData"]["CONTINUITY_RUNNER_KEYS"].split(","):
        key_id, value = entry.split("=", 1)
        assert base64.b64decode(value).startswith(b"PLACEHOLDER"), key_id
    for doc in docs:
        for key, value in doc["stringData"].items():
            if key not in NOT_SECRET:
                assert "PLACEHOLDER" in value or "UExBQ0VIT0xERVI" in value, key


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_is_deployed_hardened_and_probed(overlay: str) -> None:
    docs = render(overlay)
    deployments = by_kind(docs, "Deployment")
    for service in SERVICES:
        dep = deployments[f"continuity-{service}"]
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]  # the service; production's console has its proxy beside it
        assert container["args"] == ["serve", service]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        resources = container["resources"]
        assert {"cpu", "memory"} <= resources["requests"].keys()
        assert {"cpu", "memory"} <= resources["limits"].keys()
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["ports"][0]["containerPort"] == 9464
        keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        env = {e["name"]: e for e in container["env"]}
        nats_ref = env["NATS_URL"]["valueFrom"]["secretKeyRef"]
        assert (unhashed(nats_ref["name"]), nats_ref["key"]) == ("continuity-nats", service)
        # Each service with its own Redis user; the console keeps nothing in Redis.
        if service == "console":
            assert "REDIS_URL" not in env
        else:
            redis_ref = env["REDIS_URL"]["valueFrom"]["secretKeyRef"]
            assert (unhashed(redis_ref["name"]), redis_ref["key"]) == ("continuity-redis", service)
        # Only the classifier verifies command-result signatures, so only it gets the keys.
        assert ("CONTINUITY_RUNNER_KEYS" in env) == (service == "classifier")
        if "CONTINUITY_RUNNER_KEYS" in env:
            ref = env["CONTINUITY_RUNNER_KEYS"]["valueFrom"]["secretKeyRef"]
            assert unhashed(ref["name"]) == "continuity-runner-keys"
        # Only the session-store watches the servers as `monitor`, and its volume holds that
        # one password: no other service's URL.
        assert ("CONTINUITY_NATS_MONITOR_PASSWORD_FILE" in env) == (service == "session-store")
        if "CONTINUITY_NATS_MONITOR_PASSWORD_FILE" in env:
            assert_monitor_password_mounted(pod, container, env["CONTINUITY_NATS_MONITOR_PASSWORD_FILE"])


def assert_monitor_password_mounted(
    pod: dict[str, Any], container: dict[str, Any], file: dict[str, Any]
) -> None:
    path = Path(file["value"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert unhashed(secret["secretName"]) == "continuity-nats"
    assert secret["items"] == [{"key": "monitor", "path": path.name}]
    assert secret["defaultMode"] == 0o440


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_pdbs_and_monitoring_select_the_pods(overlay: str) -> None:
    docs = render(overlay)
    deployments = by_kind(docs, "Deployment")
    services = by_kind(docs, "Service")
    pdbs = by_kind(docs, "PodDisruptionBudget")
    for service in SERVICES:
        name = f"continuity-{service}"
        pod_labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert services[name]["spec"]["selector"].items() <= pod_labels.items()
        assert services[name]["spec"]["ports"][0]["name"] == "metrics"
        assert pdbs[name]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    monitors = by_kind(docs, "ServiceMonitor")
    if overlay == "production":
        (monitor,) = monitors.values()
        selector = monitor["spec"]["selector"]["matchLabels"]
        for service in SERVICES:
            assert selector.items() <= services[f"continuity-{service}"]["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_open_only_what_is_needed(overlay: str) -> None:
    policies = by_kind(render(overlay), "NetworkPolicy")
    deny = policies["continuity-default-deny"]["spec"]
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny
    egress_ports = {
        p["port"] for rule in policies["continuity-egress"]["spec"]["egress"] for p in rule["ports"]
    }
    assert egress_ports == {53, 4222, 6379, 26379}
    (ingress,) = policies["continuity-metrics-ingress"]["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == [9464]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_consoles_pages_are_reachable_only_from_its_own_pod(overlay: str) -> None:
    """The pages listen on the pod's loopback and no Service port leads to them; in production
    the proxy beside the console (components/console-proxy) is their one client, and only the
    ingress controller's namespace reaches the proxy's port."""
    docs = render(overlay)
    console = by_kind(docs, "Deployment")["continuity-console"]
    containers = {c["name"]: c for c in console["spec"]["template"]["spec"]["containers"]}
    env = {e["name"]: e.get("value") for e in containers["console"]["env"]}
    assert env["CONTINUITY_CONSOLE_HOST"] == "127.0.0.1"
    service = by_kind(docs, "Service")["continuity-console"]
    assert 8080 not in {p["port"] for p in service["spec"]["ports"]}
    policies = by_kind(docs, "NetworkPolicy")
    if overlay == "dev":  # signed in through `kubectl port-forward`, which needs no policy
        assert "continuity-console-ingress" not in policies and set(containers) == {"console"}
        return
    proxy = containers["oauth2-proxy"]
    args = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert args["upstream"] == "http://127.0.0.1:8080/"
    assert args["http-address"] == "0.0.0.0:4180" and args["allowed-group"] == "$(ALLOWED_GROUP)"
    [proxy_port] = [p for p in service["spec"]["ports"] if p["name"] == "proxy"]
    assert proxy_port["port"] == 4180
    policy = policies["continuity-console-ingress"]
    assert policy["metadata"]["namespace"] == console["metadata"]["namespace"]
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= console["spec"]["template"]["metadata"]["labels"].items()
    )
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    ]
    assert [p["port"] for p in rule["ports"]] == [4180]


def _config(docs: list[dict[str, Any]]) -> dict[str, str]:
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and unhashed(d["metadata"]["name"]) == "continuity-config"
    ]
    return config["data"]


def test_production_overlay() -> None:
    docs = render("production")
    assert _config(docs)["CONTINUITY_STREAM_REPLICAS"] == "3"
    assert not [d for d in docs if d["kind"] == "Secret"], "production Secrets come from outside the repo"
    deployments = by_kind(docs, "Deployment")
    for dep in deployments.values():
        assert dep["spec"]["replicas"] >= 2
        zone = dep["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
        assert zone["whenUnsatisfiable"] == "DoNotSchedule"
    (scaled,) = by_kind(docs, "ScaledObject").values()
    assert scaled["spec"]["scaleTargetRef"]["name"] == "continuity-classifier"
    assert scaled["spec"]["scaleTargetRef"]["name"] in deployments
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    assert trigger["metadata"]["stream"] == "CONTINUITY_EVENTS"
    assert trigger["metadata"]["consumer"] == "classifier"
    namespace = by_kind(docs, "Namespace")["continuity"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_dev_overlay() -> None:
    docs = render("dev")
    assert _config(docs)["CONTINUITY_STREAM_REPLICAS"] == "1"
    for dep in by_kind(docs, "Deployment").values():
        assert dep["spec"]["replicas"] == 1
    nats = by_kind(docs, "StatefulSet")["nats"]
    assert "jetstream" in by_kind(docs, "ConfigMap")["nats-config"]["data"]["nats.conf"]
    assert nats["spec"]["volumeClaimTemplates"]
    redis = by_kind(docs, "StatefulSet")["redis"]
    assert "--appendonly" in redis["spec"]["template"]["spec"]["containers"][0]["args"]
    secrets = {unhashed(d["metadata"]["name"]): d for d in docs if d["kind"] == "Secret"}
    encoded = secrets["continuity-runner-keys"]["data"]["CONTINUITY_RUNNER_KEYS"]
    keys = base64.b64decode(encoded).decode()
    _key_id, value = keys.split("=", 1)
    assert base64.b64decode(value) == b"dev-only-not-a-secret", "dev keys must stay placeholders"


def test_helm_values_describe_the_production_data_layer() -> None:
    nats = yaml.safe_load((KUSTOMIZE_DIR.parent / "helm" / "nats-values.yaml").read_text())
    cluster = nats["config"]["cluster"]
    assert (cluster["enabled"], cluster["replicas"], cluster["tls"]["enabled"]) == (True, 3, True)
    store = nats["config"]["jetstream"]["fileStore"]
    assert nats["config"]["jetstream"]["enabled"] and store["enabled"] and store["pvc"]["enabled"]
    assert nats["config"]["monitor"]["enabled"], "KEDA's nats-jetstream scaler reads the monitoring port"
    assert nats["config"]["merge"]["$include"].endswith("auth.conf")
    referenced = set(NATS_PASSWORD_VARIABLES)  # the users' passwords; runners use NKEYs
    auth = (KUSTOMIZE_DIR.parent / "nats" / "auth.conf").read_text()
    assert set(re.findall(r"\$(CONTINUITY_NATS_\w+_PASSWORD)", auth)) == referenced
    routes = {"CONTINUITY_NATS_ROUTE_PASSWORD", "CONTINUITY_NATS_ROUTES"}  # the cluster's own
    assert referenced | routes == set(nats["container"]["env"])

    redis = yaml.safe_load((KUSTOMIZE_DIR.parent / "helm" / "redis-values.yaml").read_text())
    assert redis["architecture"] == "replication"
    assert "appendonly yes" in redis["commonConfiguration"]
    assert redis["replica"]["persistence"]["enabled"]
    assert redis["sentinel"]["enabled"]
    assert redis["auth"]["existingSecret"], "the Redis password comes from a Secret, not from values"
