"""compose.yaml and deploy/Dockerfile, checked statically (no container engine here): the stack
names every service, commands are real `continuity serve <name>` commands, the image is a
non-root multi-stage build on python:3.11-slim that installs the lock's pins with hashes."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import yaml

from continuity.cli.main import build_parser
from services import registry
from tests.deploy.conftest import DEPLOY, REPO, SERVICES

DOCKERFILE = DEPLOY / "Dockerfile"
RUNTIME_LOCK = DEPLOY / "requirements-runtime.lock"


def compose() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_four_names_are_the_cli_services() -> None:
    assert set(SERVICES) == set(registry.SERVICES)
    for name in SERVICES:
        args = build_parser().parse_args(["serve", name])
        assert args.service == name


def test_compose_names_every_service() -> None:
    services = compose()["services"]
    assert {"nats", "redis", "prometheus", "grafana", *SERVICES} <= services.keys()
    for name in SERVICES:
        svc = services[name]
        assert svc["command"] == ["serve", name]
        build_parser().parse_args(svc["command"])  # a real command of the `continuity` CLI
        env = svc["environment"]
        # Each as its own user; the passwords are in its volume, not here.
        assert env["NATS_URL"] == f"tls://{name}@nats:4222"
        if name == "console":  # it keeps nothing in Redis
            assert "REDIS_URL" not in env and "CONTINUITY_REDIS_PASSWORD_FILE" not in env
        else:
            assert env["REDIS_URL"] == f"rediss://{name}@redis:6379/0"
            assert env["CONTINUITY_REDIS_PASSWORD_FILE"] == "/run/continuity/redis-password"
        assert env["CONTINUITY_STREAM_REPLICAS"] == "1"
        # The session-store alone reads the servers' connections, as the user `monitor`.
        monitor = env.get("CONTINUITY_NATS_MONITOR_PASSWORD_FILE")
        assert monitor == ("/run/continuity/nats-monitor-password" if name == "session-store" else None)
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
        assert svc["volumes"] == [f"secrets-{name}:/run/continuity:ro"]
    builds = [s["build"] for s in services.values() if "build" in s]
    assert builds == [{"context": ".", "dockerfile": "deploy/Dockerfile"}]
    assert {s.get("image") for n, s in services.items() if n in SERVICES} == {"continuity:dev"}


def test_compose_data_layer_is_durable_and_observed() -> None:
    services = compose()["services"]
    nats = services["nats"]
    assert nats["command"][-1].endswith("exec nats-server --config /etc/nats/nats-server.conf")
    assert any(v.startswith("nats-data:") for v in nats["volumes"])
    conf = (DEPLOY / "nats" / "nats-server.conf").read_text()
    assert "jetstream" in conf and "store_dir: /data" in conf
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert any(v.startswith("redis-data:") for v in services["redis"]["volumes"])
    mounts = services["prometheus"]["volumes"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    assert "./deploy/prometheus/rules:/etc/prometheus/rules:ro" in mounts
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in services["grafana"]["volumes"]
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {c["job_name"]: c["static_configs"][0]["targets"] for c in scrape["scrape_configs"]}
    for name in SERVICES:
        assert jobs[f"continuity-{name}"] == [f"{name}:9464"]


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    ins = dockerfile_instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert len(froms) >= 2, "multi-stage"
    args = dict(rest.split("=", 1) for word, rest in ins if word == "ARG" and "=" in rest)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    final = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    users = [rest for word, rest in ins[final:] if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert "pip install --require-hashes" in runs
    assert "pip install --no-deps ." in runs
    assert ("COPY", "--from=build /opt/continuity /opt/continuity") in ins[final:]


def test_dockerfile_entrypoint_runs_the_continuity_command() -> None:
    ins = dockerfile_instructions()
    entry = [yaml.safe_load(rest) for word, rest in ins if word == "ENTRYPOINT"]
    cmd = [yaml.safe_load(rest) for word, rest in ins if word == "CMD"]
    assert entry[-1] == ["continuity"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "continuity" in scripts
    assert cmd[-1][0] == "serve" and cmd[-1][1] in SERVICES
    build_parser().parse_args(cmd[-1])
    assert "EXPOSE 9464" in DOCKERFILE.read_text()


def _pins(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of a pip requirements file with hashes."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", re.sub(r"\\\n", " ", text)):
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block.strip())
        if match:
            hashes = frozenset(re.findall(r"--hash=(sha256:[0-9a-f]{64})", block))
            pins[match.group(1).lower()] = (match.group(2), hashes)
    return pins


def _requires(dist: str) -> list[str]:
    """The names a distribution requires, with the extras it asks for (e.g. redis[hiredis]).

    A requirement whose marker excludes this interpreter is not installed: it is named, not
    followed."""
    try:
        specs = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names: list[str] = []
    for spec in specs:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]+)\])?\s*(.*)", spec)
        assert match is not None, spec
        name, extras, rest = match.groups()
        if "extra ==" in rest:
            continue  # an optional dependency of this distribution; asked for below by name
        names.append(_canonical(name))
        for extra in (extras or "").split(","):
            if extra.strip():
                for sub in importlib.metadata.requires(name) or []:
                    if re.search(rf"extra\s*==\s*[\"']{re.escape(extra.strip())}[\"']", sub):
                        names.append(_canonical(re.split(r"[\s\[<>=!~;]", sub, maxsplit=1)[0]))
    return names


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_runtime_lock_is_the_runtime_part_of_the_project_lock() -> None:
    full = _pins((REPO / "requirements.lock").read_text())
    runtime = _pins(RUNTIME_LOCK.read_text())
    assert runtime, "deploy/requirements-runtime.lock is empty"
    for name, (version, hashes) in runtime.items():
        assert name in full, f"{name} is not in requirements.lock"
        assert full[name][0] == version, f"{name}: {version} here, {full[name][0]} in requirements.lock"
        assert hashes and hashes <= full[name][1], f"{name}: hashes differ from requirements.lock"

    # The runtime closure of the project according to the installed distributions' metadata
    # (markers ignored: a superset, cut to what the full lock pins).
    closure: set[str] = set()
    todo = _requires("continuity")
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo += _requires(name)
    closure = {n for n in closure if n in full}
    assert set(runtime) == closure, (
        "deploy/requirements-runtime.lock is stale: regenerate it with `make lock`"
    )


def test_every_file_the_image_copies_is_in_the_build_context() -> None:
    # The ignore file admits by "!" lines after excluding everything; a COPY of a path it does
    # not admit fails the build, which cannot run here (no container engine).
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    admitted = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    assert "*" in ignore
    copies = [
        source
        for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE.read_text(), re.M)
        for source in line.split()[:-1]
    ]
    assert "LICENSE" in copies
    for source in copies:
        if source.startswith("${"):
            continue  # the build argument, a lock file admitted above
        assert any(source == a or source.startswith(a + "/") for a in admitted), source
        assert (REPO / source).exists(), source
    # The build argument's default and its documented alternative.
    assert {"deploy/requirements-runtime.lock", "requirements.lock"} <= set(admitted)
