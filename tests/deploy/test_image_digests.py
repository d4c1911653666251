"""Every container image the deployment files name is pinned by the digest of its index
(`NAME:TAG@sha256:<64 hex>`, the tag kept for readers): compose.yaml, deploy/Dockerfile (its
base image and its syntax frontend), the Kubernetes manifests and kustomizations under
deploy/kubernetes (container `image:` fields, also inside patches, and kustomize `images:`
entries), the overlays as kustomize renders them, and the images the Helm values set or leave
to their charts. The exceptions are named below, each with its reason; an exception that no
longer applies fails too, so that it is dropped (docs/operations/security.md, "Images")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, KUSTOMIZE_DIR, OVERLAYS, REPO, render

PINNED = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

OWN_IMAGE = "continuity"
"""The project's own image (`continuity:dev`, `ghcr.io/example/continuity`, your registry's
`.../continuity`): built from deploy/Dockerfile by the operator, whose build and registry give
it its digest; the files name it by tag, and the operator deploys it by that digest."""

NOT_PINNED: dict[str, str] = {
    "deploy/helm/nats-values.yaml: promExporter.image": (
        "no digest of a tagged natsio/prometheus-nats-exporter release could be established; "
        "the chart's tag is used"
    ),
    "deploy/helm/redis-values.yaml: image": (
        "no digest of the Bitnami chart's Redis image could be established; the chart's tag is used"
    ),
    "deploy/helm/redis-values.yaml: sentinel.image": (
        "no digest of the Bitnami chart's Sentinel image could be established; the chart's tag is used"
    ),
    "deploy/helm/redis-values.yaml: metrics.image": (
        "no digest of the Bitnami chart's exporter image could be established; the chart's tag is used"
    ),
}
"""Images named by tag only (or left to a chart's default), where -> why."""

CHART_IMAGES: dict[str, tuple[str, ...]] = {
    # nats-io/k8s helm/charts/nats: each image block has repository, tag, digest (from chart
    # 1.2.11), registry and fullImageName; the exporter runs when promExporter.enabled.
    "nats-values.yaml": (
        "container.image",
        "reloader.image",
        "natsBox.container.image",
        "promExporter.image",
    ),
    # bitnami/redis: image, sentinel.image (sentinel.enabled), metrics.image (metrics.enabled),
    # each with registry, repository, tag and digest.
    "redis-values.yaml": ("image", "sentinel.image", "metrics.image"),
}
"""The images each chart runs with the shipped values, by their values key: each must be set
here with a digest, or be named in NOT_PINNED."""


@dataclass(frozen=True)
class Ref:
    where: str
    """`<file>: <place in it>`, as NOT_PINNED names it."""
    image: str | None
    """The reference as written (a Helm block joined into NAME[:TAG][@DIGEST]); None when a
    chart's image is not set at all, so the chart's own tag is used."""


def is_own(image: str) -> bool:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0] == OWN_IMAGE


def is_pinned(image: str | None) -> bool:
    return image is not None and PINNED.fullmatch(image) is not None


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# ---- where the references are ---------------------------------------------------------------


def compose_refs() -> Iterator[Ref]:
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    for name, service in services.items():
        if "image" in service:
            yield Ref(f"compose.yaml: services.{name}.image", str(service["image"]))


def dockerfile_refs() -> Iterator[Ref]:
    """The syntax frontend, the ARGs that name images, and every FROM that is not an ARG or an
    earlier stage."""
    path = DEPLOY / "Dockerfile"
    text = path.read_text()
    syntax = re.match(r"#\s*syntax\s*=\s*(\S+)", text)
    if syntax:
        yield Ref(f"{relative(path)}: syntax", syntax.group(1))
    stages: set[str] = set()
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "ARG" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            if name.endswith("IMAGE"):
                yield Ref(f"{relative(path)}: ARG {name}", value)
        elif len(words) >= 2 and words[0].upper() == "FROM":
            image = next(w for w in words[1:] if not w.startswith("--"))
            if not image.startswith("$") and image not in stages:
                yield Ref(f"{relative(path)}: FROM {image}", image)
            if len(words) >= 4 and words[-2].upper() == "AS":
                stages.add(words[-1])


def _walk(node: Any, place: str) -> Iterator[tuple[str, Any, Any]]:
    """(place, key, value) of every mapping member below `node`, patches' text parsed too."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{place}.{key}" if place else str(key)
            yield here, key, value
            if key == "patch" and isinstance(value, str):
                for i, doc in enumerate(yaml.safe_load_all(value)):
                    yield from _walk(doc, f"{here}[{i}]")
            else:
                yield from _walk(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{place}[{i}]")


def kubernetes_files() -> list[Path]:
    return sorted(KUSTOMIZE_DIR.rglob("*.yaml"))


def kubernetes_refs() -> Iterator[Ref]:
    """Every `image:` string of a manifest (containers, init containers, patched-in ones)."""
    for path in kubernetes_files():
        for n, doc in enumerate(yaml.safe_load_all(path.read_text())):
            for place, key, value in _walk(doc, f"[{n}]"):
                if key == "image" and isinstance(value, str):
                    yield Ref(f"{relative(path)}: {place}", value)


def kustomize_images() -> Iterator[tuple[Ref, str]]:
    """Each kustomize `images:` entry as the reference it makes, with the name it replaces."""
    for path in sorted(KUSTOMIZE_DIR.rglob("kustomization.yaml")):
        for i, entry in enumerate(yaml.safe_load(path.read_text()).get("images") or []):
            image = str(entry.get("newName") or entry["name"])
            if entry.get("newTag"):
                image += f":{entry['newTag']}"
            if entry.get("digest"):
                image += f"@{entry['digest']}"
            yield Ref(f"{relative(path)}: images[{i}] ({entry['name']})", image), str(entry["name"])


def _helm_image(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("fullImageName"):
        return str(block["fullImageName"])
    if not block.get("repository"):
        return None
    image = str(block["repository"])
    if block.get("tag"):
        image += f":{block['tag']}"
    if block.get("digest"):
        image += f"@{block['digest']}"
    return image


def helm_refs() -> Iterator[Ref]:
    """The images each chart runs (CHART_IMAGES), set or not, and any other image the values
    name (an image block elsewhere, a container in extraResources)."""
    for path in sorted((DEPLOY / "helm").glob("*.yaml")):
        values = yaml.safe_load(path.read_text()) or {}
        known = CHART_IMAGES.get(path.name, ())
        for key in known:
            node: Any = values
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            yield Ref(f"{relative(path)}: {key}", _helm_image(node))
        for place, key, value in _walk(values, ""):
            if key != "image" or place in known:
                continue
            image = value if isinstance(value, str) else _helm_image(value)
            if image is not None:  # not a block without a repository (global.image: pull policy)
                yield Ref(f"{relative(path)}: {place}", image)


def all_refs() -> list[Ref]:
    refs = [*compose_refs(), *dockerfile_refs(), *kubernetes_refs(), *helm_refs()]
    refs += [ref for ref, _ in kustomize_images()]
    return refs


def kustomize_placeholders() -> set[str]:
    """Names that kustomize `images:` entries replace, when every entry naming one pins it (or
    it is the project's own): a manifest may name such an image bare; the rendered overlays
    below show what replaces it."""
    entries: dict[str, list[Ref]] = {}
    for ref, name in kustomize_images():
        entries.setdefault(name, []).append(ref)
    return {
        name
        for name, refs in entries.items()
        if all(is_pinned(r.image) or (r.image is not None and is_own(r.image)) for r in refs)
    }


def unpinned(refs: list[Ref]) -> list[Ref]:
    placeholders = kustomize_placeholders()
    return [
        ref
        for ref in refs
        if not is_pinned(ref.image)
        and not (ref.image is not None and (is_own(ref.image) or ref.image in placeholders))
    ]


# ---- the tests ------------------------------------------------------------------------------


def test_every_image_reference_is_found() -> None:
    """The scan sees what the files hold: the images of compose, the Dockerfile, the manifests,
    the kustomizations and the Helm values are all among the references."""
    refs = all_refs()
    wheres = {r.where.split(":", 1)[0] for r in refs}
    assert {"compose.yaml", "deploy/Dockerfile", "deploy/helm/nats-values.yaml"} <= wheres
    images = {r.image for r in refs}
    assert {"oauth2-proxy", "continuity"} <= images, "the component's and the base's placeholders"
    assert any(r.image and r.image.startswith("nats:") for r in refs if "overlays/dev" in r.where)
    assert len([r for r in refs if r.where.startswith("compose.yaml")]) >= 7


def test_every_image_is_pinned_by_digest() -> None:
    bad = [r for r in unpinned(all_refs()) if r.where not in NOT_PINNED]
    assert not bad, "not pinned by sha256 digest:\n" + "\n".join(f"  {r.where}: {r.image}" for r in bad)


def test_every_exception_still_applies() -> None:
    """An exception for an image now pinned, or for a place that no longer names one, is stale."""
    missing = unpinned(all_refs())
    stale = set(NOT_PINNED) - {r.where for r in missing}
    assert not stale, f"pinned now or gone, drop from NOT_PINNED: {sorted(stale)}"
    assert all(reason.strip() for reason in NOT_PINNED.values())


def test_one_image_one_digest() -> None:
    """The same NAME:TAG carries the same digest wherever it is named (compose, the dev
    overlay, the Helm values), so that a bump moves all of them."""
    digests: dict[str, set[str]] = {}
    for ref in all_refs():
        if is_pinned(ref.image):
            assert ref.image is not None
            name, digest = ref.image.split("@", 1)
            digests.setdefault(name, set()).add(digest)
    assert all(DIGEST.fullmatch(d) for ds in digests.values() for d in ds)
    differing = {name: ds for name, ds in digests.items() if len(ds) > 1}
    assert not differing, f"one NAME:TAG, several digests: {differing}"


def _pod_images(doc: Any) -> Iterator[str]:
    for _, key, value in _walk(doc, ""):
        if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(value, list):
            for container in value:
                if isinstance(container, dict) and "image" in container:
                    yield str(container["image"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rendered_overlay_runs_only_pinned_images(overlay: str) -> None:
    """What kustomize makes of the overlay: every container but the project's own is named by
    digest, the placeholders (`oauth2-proxy`) replaced by their `images:` entries."""
    images = sorted({image for doc in render(overlay) for image in _pod_images(doc)})
    assert images, overlay
    bad = [image for image in images if not is_pinned(image) and not is_own(image)]
    assert not bad, f"{overlay} renders images without a digest: {bad}"
