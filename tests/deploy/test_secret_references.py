"""Every Secret and ConfigMap key that a manifest (the rendered overlays, the examples) or a Helm
value reads is created by the steps of docs/operations/deploy.md before the step that deploys
the reader, and the example Secrets have the same keys as those steps.

The steps are read from the page's `sh` blocks: `kubectl create secret generic|tls`, `kubectl
create configmap`, `kubectl apply -f` (Secrets and cert-manager Certificates in the file),
`helm upgrade --install ... -f VALUES` and `kubectl apply -k OVERLAY`. Reads are found by field:
`secretKeyRef`, `configMapKeyRef`, `envFrom` `secretRef`/`configMapRef`, secret and configMap
volumes (the keys a container uses through the mount path), a CA issuer's Secret, and the
charts' own settings (RULES below). A field of that kind that no rule understands fails the
test, so a new kind of reference cannot slip past it.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from services.console.config import ConsoleConfig
from services.console.identity import Refused, proxy_identity
from tests.deploy.conftest import DEPLOY, KUSTOMIZE_DIR, REPO, by_kind, render

DEPLOY_MD = REPO / "docs" / "operations" / "deploy.md"
EXAMPLES = KUSTOMIZE_DIR / "examples"
CERT_MANAGER_NAMESPACE = "cert-manager"
"""Where cert-manager looks for a ClusterIssuer's Secret (its `--cluster-resource-namespace`)."""
CERTIFICATE_KEYS = frozenset({"ca.crt", "tls.crt", "tls.key"})
"""What cert-manager writes into a Certificate's Secret (ca.crt with a CA issuer)."""
WATCHED = frozenset(
    {"secretName", "secretKeyRef", "secretRef", "configMapKeyRef", "configMapRef", "existingSecret"}
)
"""Field names that name a Secret or ConfigMap; each occurrence must be understood by a rule."""
POD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"})

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Ref:
    kind: str  # Secret or ConfigMap
    namespace: str
    name: str
    key: str | None  # None: the whole object (envFrom, a volume whose keys are not named)
    where: str


@dataclass
class Reads:
    refs: list[Ref] = field(default_factory=list)
    understood: set[Path_] = field(default_factory=set)

    def add(self, ref: Ref, *paths: Path_) -> None:
        self.refs.append(ref)
        self.understood.update(paths)

    def not_understood(self, tree: Any, where: str) -> list[str]:
        return [
            f"{where}: {'.'.join(map(str, path))}"
            for path, _ in walk(tree)
            if path and path[-1] in WATCHED and path not in self.understood
        ]


def walk(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, (*path, i))


# ---- reads of Kubernetes objects ------------------------------------------------------------------


def _pod_spec(doc: dict[str, Any]) -> tuple[Path_, dict[str, Any]] | None:
    if doc.get("kind") in POD_KINDS:
        return ("spec", "template", "spec"), doc["spec"]["template"]["spec"]
    if doc.get("kind") == "Pod":
        return ("spec",), doc["spec"]
    return None


def _unhashed(name: str) -> str:
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def object_reads(doc: dict[str, Any], default_namespace: str, where: str, reads: Reads) -> None:
    """The Secrets and ConfigMaps one Kubernetes object reads."""
    namespace = doc["metadata"].get("namespace", default_namespace)
    label = f"{where}: {doc['kind']}/{doc['metadata']['name']}"
    found = _pod_spec(doc)
    if found:
        base, pod = found
        _pod_reads(pod, base, namespace, label, reads)
    if doc.get("kind") == "Certificate":  # writes its Secret; reads none
        reads.understood.add(("spec", "secretName"))
    if doc.get("kind") == "ClusterIssuer" and "ca" in doc["spec"]:
        name = doc["spec"]["ca"]["secretName"]
        for key in ("tls.crt", "tls.key"):
            reads.add(Ref("Secret", CERT_MANAGER_NAMESPACE, name, key, label), ("spec", "ca", "secretName"))


def _pod_reads(pod: dict[str, Any], base: Path_, namespace: str, label: str, reads: Reads) -> None:
    containers = [("containers", i, c) for i, c in enumerate(pod.get("containers", []))]
    containers += [("initContainers", i, c) for i, c in enumerate(pod.get("initContainers", []))]
    for group, i, container in containers:
        at: Path_ = (*base, group, i)
        for j, env in enumerate(container.get("env", [])):
            source = env.get("valueFrom", {})
            for fld, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if fld in source:
                    ref = source[fld]
                    reads.add(
                        Ref(kind, namespace, _unhashed(ref["name"]), ref["key"], label),
                        (*at, "env", j, "valueFrom", fld),
                    )
        for j, source in enumerate(container.get("envFrom", [])):
            for fld, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if fld in source:
                    name = _unhashed(source[fld]["name"])
                    reads.add(Ref(kind, namespace, name, None, label), (*at, "envFrom", j, fld))
    for v, volume in enumerate(pod.get("volumes", [])):
        for fld, kind, name_field in (("secret", "Secret", "secretName"), ("configMap", "ConfigMap", "name")):
            if fld not in volume:
                continue
            name = _unhashed(volume[fld][name_field])
            keys = [item["key"] for item in volume[fld].get("items", [])]
            keys = keys or _keys_through_mounts(pod, volume["name"])
            paths = [(*base, "volumes", v, fld), (*base, "volumes", v, fld, name_field)]
            for key in keys or [None]:
                reads.add(Ref(kind, namespace, name, key, label), *paths)


def _keys_through_mounts(pod: dict[str, Any], volume: str) -> list[str]:
    """The keys of a volume that the containers name by path, in their variables
    (CONTINUITY_NATS_TLS_CA=/etc/continuity/tls/ca.crt: key ca.crt)."""
    keys = []
    for container in pod.get("containers", []):
        for mount in container.get("volumeMounts", []):
            if mount["name"] != volume:
                continue
            prefix = PurePosixPath(mount["mountPath"])
            for env in container.get("env", []):
                value = PurePosixPath(str(env.get("value", "")))
                if value.parent == prefix:
                    keys.append(value.name)
    return sorted(set(keys))


# ---- reads of Helm values ---------------------------------------------------------------------------

CHART_RULES: dict[str, list[tuple[Path_, str, dict[str, str]]]] = {
    # nats/nats 1.x: config.nats.tls (and config.cluster.tls, the routes') mounts `secretName` and
    # reads `cert` and `key` from it;
    # tlsCA reads `key`; a nats-box context's tls mounts `secretName` for its `cert` and `key`.
    "nats-values.yaml": [
        (("config", "nats", "tls"), "secretName", {"cert": "tls.crt", "key": "tls.key"}),
        (("config", "cluster", "tls"), "secretName", {"cert": "tls.crt", "key": "tls.key"}),
        (("tlsCA",), "secretName", {"key": "ca.crt"}),
        (("natsBox", "contexts", "*", "tls"), "secretName", {"cert": "tls.crt", "key": "tls.key"}),
    ],
    # bitnami/redis: auth.existingSecret with its password key; tls.existingSecret and its files;
    # the ACL Secret mounted as a volume of the Redis pods (the file aclfile names).
    "redis-values.yaml": [
        (("auth",), "existingSecret", {"existingSecretPasswordKey": "redis-password"}),
        (("replica", "extraVolumes", "*", "secret"), "secretName", {"aclfile": "users.acl"}),
        (
            ("tls",),
            "existingSecret",
            {"certFilename": "tls.crt", "certKeyFilename": "tls.key", "certCAFilename": "ca.crt"},
        ),
    ],
}


def _matches(path: Path_, pattern: Path_) -> bool:
    return len(path) == len(pattern) and all(p == "*" or p == q for p, q in zip(pattern, path, strict=True))


def values_reads(path: Path, namespace: str, reads: Reads) -> None:
    values = yaml.safe_load(path.read_text())
    label = f"{path.name}"
    for at, node in walk(values):
        if not isinstance(node, dict):
            continue
        for pattern, name_field, key_fields in CHART_RULES.get(path.name, []):
            if _matches(at, pattern) and node.get(name_field):
                for key_field, default in key_fields.items():
                    key = node.get(key_field, default)
                    reads.add(Ref("Secret", namespace, node[name_field], key, label), (*at, name_field))
        if "secretKeyRef" in node:  # container env in the chart's `env` maps
            ref = node["secretKeyRef"]
            reads.add(Ref("Secret", namespace, ref["name"], ref["key"], label), (*at, "secretKeyRef"))
        if isinstance(node.get("configMap"), dict) and "name" in node:  # a volume in a patch
            for key in _chart_config_keys(values):
                reads.add(Ref("ConfigMap", namespace, node["configMap"]["name"], key, label))


def _chart_config_keys(values: dict[str, Any]) -> list[str]:
    """The files of the auth ConfigMap the NATS configuration includes: the one named in
    `config.merge.$include`, and what that one includes beside it."""
    include = values.get("config", {}).get("merge", {}).get("$include")
    if not include:
        return []
    first = PurePosixPath(include).name
    text = (DEPLOY / "nats" / first).read_text()
    return [first, *re.findall(r"^\s*include\s+\./(\S+)", text, re.MULTILINE)]


# ---- the steps of deploy.md ----------------------------------------------------------------------------


@dataclass
class Steps:
    """What the page's commands create, in order, and what they deploy."""

    created: list[tuple[int, str, str, str, frozenset[str], str]] = field(default_factory=list)
    """(position, kind, namespace, name, keys, how)."""
    helm: list[tuple[int, Path, str]] = field(default_factory=list)
    """(position, values file, namespace)."""
    applied: list[tuple[int, Path]] = field(default_factory=list)
    """(position, file or overlay directory) of `kubectl apply -f|-k`."""
    own_reads: list[tuple[int, Ref]] = field(default_factory=list)
    """`kubectl get secret ... {.data.KEY}` inside the page's own commands."""
    literals: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    """The --from-literal values of each created Secret, as written."""

    def keys_before(self, position: int, kind: str, namespace: str, name: str) -> set[str] | None:
        found = [
            keys
            for pos, k, ns, n, keys, _ in self.created
            if pos < position and (k, ns, n) == (kind, namespace, name)
        ]
        return set().union(*found) if found else None


def shell_commands(text: str) -> list[str]:
    """Each command of the page's `sh` blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


_GET_SECRET = re.compile(
    r"kubectl\s+-n\s+(?P<ns>\S+)\s+get\s+secret\s+(?P<name>[\w.-]+)\s+-o\s+jsonpath=['\"]?"
    r"\{\.data\.(?P<key>[^}]+)\}"
)
_FUNCTION = re.compile(r"^(?P<fn>\w+)\(\)\s*\{(?P<body>.*)\}\s*;?$")


def _option(tokens: list[str], *names: str) -> str | None:
    for i, token in enumerate(tokens):
        for name in names:
            if token == name and i + 1 < len(tokens):
                return tokens[i + 1]
            if token.startswith(f"{name}="):
                return token.split("=", 1)[1]
    return None


def parse_steps(text: str) -> Steps:
    steps = Steps()
    functions: dict[str, tuple[str, str]] = {}
    for position, command in enumerate(shell_commands(text)):
        defined = _FUNCTION.match(command)
        if defined:
            read = _GET_SECRET.search(defined.group("body"))
            if read and read.group("key") == "$1":
                functions[defined.group("fn")] = (read.group("ns"), read.group("name"))
            continue
        for read in _GET_SECRET.finditer(command):
            ref = Ref("Secret", read.group("ns"), read.group("name"), read.group("key"), "deploy.md")
            steps.own_reads.append((position, ref))
        for fn, (ns, name) in functions.items():
            for arg in re.findall(rf"\$\({fn}\s+([\w.-]+)\)", command):
                steps.own_reads.append((position, Ref("Secret", ns, name, arg, "deploy.md")))
        tokens = shlex.split(command, comments=True)
        if not tokens:
            continue
        words = _words(tokens)
        if tokens[0] == "helm" and tokens[1:3] == ["upgrade", "--install"]:
            values = _option(tokens, "-f", "--values")
            namespace = _option(tokens, "--namespace", "-n")
            assert values and namespace, command
            steps.helm.append((position, REPO / values, namespace))
        if tokens[0] != "kubectl":
            continue
        namespace = _option(tokens, "-n", "--namespace") or "default"
        if words[:3] == ["create", "secret", "generic"] or words[:2] == ["create", "configmap"]:
            kind = "Secret" if words[1] == "secret" else "ConfigMap"
            name = words[3] if kind == "Secret" else words[2]
            keys, literals = _from_options(tokens)
            steps.created.append((position, kind, namespace, name, frozenset(keys), "deploy.md"))
            steps.literals[(namespace, name)] = literals
        elif words[:3] == ["create", "secret", "tls"]:
            pair = frozenset({"tls.crt", "tls.key"})
            steps.created.append((position, "Secret", namespace, words[3], pair, "deploy.md"))
        elif words[:1] == ["apply"]:
            target = _option(tokens, "-f", "-k")
            assert target, command
            steps.applied.append((position, REPO / target))
            if "-f" in tokens:
                for doc in load_docs(REPO / target):
                    _created_by(doc, position, namespace, steps)
    return steps


_WITH_VALUE = frozenset({"-n", "--namespace", "-f", "-k", "-o", "-l", "--cert", "--key", "--values"})


def _words(tokens: list[str]) -> list[str]:
    """A command's words without its options and their values (`kubectl -n nats create ...`:
    create ...)."""
    words, skip = [], False
    for token in tokens[1:]:
        if skip:
            skip = False
        elif token.startswith("-"):
            skip = token in _WITH_VALUE
        else:
            words.append(token)
    return words


def _from_options(tokens: list[str]) -> tuple[set[str], dict[str, str]]:
    keys: set[str] = set()
    literals: dict[str, str] = {}
    for token in tokens:
        if token.startswith("--from-literal="):
            key, _, value = token.removeprefix("--from-literal=").partition("=")
            keys.add(key)
            literals[key] = value
        elif token.startswith("--from-file="):
            spec = token.removeprefix("--from-file=")
            keys.add(spec.split("=", 1)[0] if "=" in spec else PurePosixPath(spec).name)
    return keys, literals


def _created_by(doc: dict[str, Any], position: int, namespace: str, steps: Steps) -> None:
    ns = doc["metadata"].get("namespace", namespace)
    if doc["kind"] == "Secret":
        keys = frozenset({*doc.get("data", {}), *doc.get("stringData", {})})
        steps.created.append((position, "Secret", ns, doc["metadata"]["name"], keys, "applied file"))
    if doc["kind"] == "Certificate":
        name = doc["spec"]["secretName"]
        steps.created.append((position, "Secret", ns, name, CERTIFICATE_KEYS, "cert-manager"))


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# ---- the checks ------------------------------------------------------------------------------------------


def missing(steps: Steps, position: int, refs: list[Ref], rendered: list[dict[str, Any]]) -> list[str]:
    """The refs that neither the page's earlier steps nor the rendered objects create."""
    problems = []
    for ref in refs:
        keys = steps.keys_before(position, ref.kind, ref.namespace, ref.name)
        in_render = [
            d
            for d in rendered
            if d["kind"] == ref.kind
            and _unhashed(d["metadata"]["name"]) == ref.name
            and d["metadata"].get("namespace") == ref.namespace
        ]
        for doc in in_render:
            keys = (keys or set()) | {*doc.get("data", {}), *doc.get("stringData", {})}
        what = f"{ref.where} reads {ref.kind} {ref.namespace}/{ref.name}"
        what += f" key {ref.key!r}" if ref.key is not None else ""
        if keys is None:
            problems.append(f"{what}: never created before")
        elif ref.key is not None and ref.key not in keys:
            problems.append(f"{what}: created without it (keys: {', '.join(sorted(keys))})")
    return list(dict.fromkeys(problems))


def check_page(text: str) -> list[str]:
    """Every problem of the page against the manifests, the examples and the Helm values."""
    steps = parse_steps(text)
    problems: list[str] = []
    for position, ref in steps.own_reads:
        problems += missing(steps, position, [ref], [])
    for position, values, namespace in steps.helm:
        reads = Reads()
        values_reads(values, namespace, reads)
        problems += reads.not_understood(yaml.safe_load(values.read_text()), values.name)
        problems += missing(steps, position, reads.refs, [])
    for position, target in steps.applied:
        if target.is_dir():
            docs = render(target.name)
            where = f"overlay {target.name}"
        else:
            docs = load_docs(target)
            where = target.name
        for doc in docs:
            reads = Reads()
            object_reads(doc, "default", where, reads)
            problems += reads.not_understood(doc, f"{where}: {doc['kind']}/{doc['metadata']['name']}")
            problems += missing(steps, position, reads.refs, docs)
    return list(dict.fromkeys(problems))


def test_the_deploy_page_creates_every_key_that_is_read() -> None:
    problems = check_page(DEPLOY_MD.read_text())
    assert not problems, "\n".join(problems)


def test_the_dev_overlay_creates_what_it_reads() -> None:
    """`kubectl apply -k overlays/dev` alone: its generated Secrets and ConfigMaps."""
    docs = render("dev")
    problems = []
    for doc in docs:
        reads = Reads()
        object_reads(doc, "default", "overlay dev", reads)
        problems += reads.not_understood(doc, f"dev: {doc['kind']}/{doc['metadata']['name']}")
        problems += missing(Steps(), 0, reads.refs, docs)
    assert not problems, "\n".join(problems)


def test_the_page_deploys_everything_there_is() -> None:
    """The check covers every Helm values file, the production overlay and every example."""
    steps = parse_steps(DEPLOY_MD.read_text())
    assert {values.name for _, values, _ in steps.helm} == {p.name for p in (DEPLOY / "helm").glob("*.yaml")}
    applied = {target for _, target in steps.applied}
    assert KUSTOMIZE_DIR / "overlays" / "production" in applied
    examples = {p for p in EXAMPLES.glob("*.yaml") if p.name != "secrets.example.yaml"}
    assert examples <= applied, "an example the page never applies is checked by nobody"


PLANTED = {
    "NATS pods: a user's password": (
        '  --from-literal=console="$(openssl rand -hex 24 | tr 0-9 g-p)" \\\n',
        "",
        "nats-values.yaml reads Secret nats/nats-continuity-users key 'console'",
    ),
    "the console's NATS URL": (
        '" \\\n  --from-literal=console="tls://console:$(pw console)@nats.nats.svc.cluster.local:4222"',
        '"',
        "reads Secret continuity/continuity-nats key 'console'",
    ),
    "the console's Secret": (
        "create secret generic continuity-console \\",
        "create secret generic continuity-konsole \\",
        "reads Secret continuity/continuity-console: never created",
    ),
    "the proxy's cookie key": (
        "--from-literal=cookie-secret=",
        "--from-literal=cookie-secrets=",
        "reads Secret continuity/continuity-console-proxy key 'cookie-secret'",
    ),
    "every certificate": (
        "kubectl apply -f deploy/kubernetes/examples/certificates.example.yaml\n",
        "",
        "nats-values.yaml reads Secret nats/nats-server-tls key 'tls.crt': never created",
    ),
    "a password read before it is made": (
        "kubectl -n redis create secret generic redis-auth",
        "kubectl -n redis create secret generic redis-auth-later",
        "deploy.md reads Secret redis/redis-auth key 'redis-password': never created",
    ),
}


@pytest.mark.parametrize("case", PLANTED)
def test_a_missing_key_is_found(case: str) -> None:
    """The check itself: the page with one creation taken out is refused, naming the reader."""
    old, new, expected = PLANTED[case]
    text = DEPLOY_MD.read_text()
    assert text.count(old) == 1, old
    problems = check_page(text.replace(old, new))
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_every_secret_the_operations_pages_read_is_created_by_the_deploy_page() -> None:
    """tls.md's and the runbooks' `kubectl get secret ... {.data.KEY}` read what deploy.md makes."""
    text = DEPLOY_MD.read_text()
    steps = parse_steps(text)
    end = len(shell_commands(text))
    reads = 0
    for page in sorted(DEPLOY_MD.parent.glob("*.md")):
        for command in shell_commands(page.read_text()):
            for read in _GET_SECRET.finditer(command):
                key = read.group("key").replace("\\.", ".")  # jsonpath escapes the dots of a key
                if key == "$1":
                    continue
                reads += 1
                ref = Ref("Secret", read.group("ns"), read.group("name"), key, page.name)
                assert not missing(steps, end, [ref], []), ref
    assert reads >= 4, "tls.md copies the operators' certificate and reads their password"


def test_the_example_secrets_have_the_keys_the_page_creates() -> None:
    steps = parse_steps(DEPLOY_MD.read_text())
    for doc in load_docs(EXAMPLES / "secrets.example.yaml"):
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        created = steps.keys_before(len(shell_commands(DEPLOY_MD.read_text())), "Secret", ns, name)
        assert created is not None, f"the page never creates {ns}/{name}"
        assert set(doc["stringData"]) == created, name


def test_a_field_no_rule_understands_fails_the_check() -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "data": {},
        "spec": {"tls": {"secretName": "somewhere"}},
    }
    reads = Reads()
    object_reads(doc, "default", "test", reads)
    assert reads.not_understood(doc, "test") == ["test: spec.tls.secretName"]


# ---- the console and its proxy -----------------------------------------------------------------------------

PROXY_HEADERS = {
    "X-Forwarded-User",
    "X-Forwarded-Email",
    "X-Forwarded-Preferred-Username",
    "X-Forwarded-Groups",
}
"""What oauth2-proxy sets from the session with --pass-user-headers=true."""


def _console_env() -> dict[str, str]:
    """The console's Secret as deploy.md creates it, generated values made on the spot."""
    steps = parse_steps(DEPLOY_MD.read_text())
    env = {}
    for key, value in steps.literals[("continuity", "continuity-console")].items():
        if value == "$(openssl rand -base64 32)":
            value = base64.b64encode(os.urandom(32)).decode()
        assert "$(" not in value, f"{key}: a generated value this test does not know how to make"
        env[key] = value
    return env


def test_the_production_console_starts_with_the_secret_the_page_creates() -> None:
    console = by_kind(render("production"), "Deployment")["continuity-console"]
    [container] = [c for c in console["spec"]["template"]["spec"]["containers"] if c["name"] == "console"]
    [source] = [s for s in container["envFrom"] if "secretRef" in s]
    assert source["secretRef"] == {"name": "continuity-console", "optional": False}
    config = ConsoleConfig.from_env(_console_env())
    assert config.identity_header and config.trusted_proxies and not config.dev_token
    assert len(config.session_key) >= 32 and config.secure_cookies


def test_the_proxy_sets_the_header_the_console_reads() -> None:
    config = ConsoleConfig.from_env(_console_env())
    production = render("production")
    console = by_kind(production, "Deployment")["continuity-console"]
    containers = {c["name"]: c for c in console["spec"]["template"]["spec"]["containers"]}
    proxy = containers["oauth2-proxy"]
    args = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert args["pass-user-headers"] == "true"
    assert config.identity_header in PROXY_HEADERS
    example = {d["metadata"]["name"]: d for d in load_docs(EXAMPLES / "secrets.example.yaml")}
    assert example["continuity-console"]["stringData"]["CONTINUITY_CONSOLE_IDENTITY_HEADER"] == (
        config.identity_header
    )
    # The proxy reaches the console's pages over the pod's loopback, the one address the console
    # trusts the header from; no other address is trusted.
    env = {e["name"]: e.get("value") for e in containers["console"]["env"]}
    port = next(p["containerPort"] for p in containers["console"]["ports"] if p["name"] == "http")
    assert args["upstream"] == f"http://{env['CONTINUITY_CONSOLE_HOST']}:{port}/" == "http://127.0.0.1:8080/"
    assert [str(n) for n in config.trusted_proxies] == ["127.0.0.1/32"] and not config.trusted_proxy_ranges
    # Only the members of the group the page configures sign in.
    variables = {e["name"]: e["valueFrom"] for e in proxy["env"]}
    assert args["allowed-group"] == "$(ALLOWED_GROUP)"
    assert variables["ALLOWED_GROUP"]["configMapKeyRef"]["key"] == "allowed-group"
    steps = parse_steps(DEPLOY_MD.read_text())
    assert steps.literals[("continuity", "continuity-console-proxy")]["allowed-group"]
    # The proxy is the only client the NetworkPolicy admits, on its own port.
    service = by_kind(production, "Service")["continuity-console"]
    [proxy_port] = [p for p in service["spec"]["ports"] if p["name"] == "proxy"]
    [rule] = by_kind(production, "NetworkPolicy")["continuity-console-ingress"]["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [proxy_port["port"]]


def test_the_console_refuses_an_email_address_as_the_identity() -> None:
    """deploy.md: the proxy passes the preferred username, since an e-mail is no TOKEN."""
    config = ConsoleConfig.from_env(_console_env())
    peer = str(config.trusted_proxies[0].network_address)
    assert proxy_identity(config, peer, ["alice"]) == "alice"
    with pytest.raises(Refused, match="invalid_identity"):
        proxy_identity(config, peer, ["alice@example.com"])
    with pytest.raises(Refused, match="untrusted_proxy"):
        proxy_identity(config, "192.0.2.1", ["alice"])
