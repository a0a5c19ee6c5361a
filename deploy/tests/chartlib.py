"""Rendering the chart with the real Helm v4 SDK and validating what it renders.

`helm-python-sdk` binds (ctypes) to libhelm_c, a C ABI over Helm's Go SDK
(helm.sh/helm/v4/pkg/engine): templates are rendered by Helm's own engine with
Sprig and Helm's functions, exactly as `helm template` would.
"""

from __future__ import annotations

import functools
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import helm_python as helm
import kubernetes_validate.utils as kv_utils
import yaml
from helm_python import _native

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "deploy" / "helm" / "hami-rs"
DOCKER_DIR = REPO / "deploy" / "docker"

RELEASE = "hami"
NAMESPACE = "gpu-system"

# The Kubernetes minors the chart supports (Chart.yaml kubeVersion >= 1.30).
KUBE_MINORS = list(range(30, 38))

# kubernetes-validate ships one JSON-schema set per minor; reading the big
# _definitions.json once per object would dominate the run, so keep them.
kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)


@functools.lru_cache(maxsize=1)
def chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


def render_raw(
    values: dict[str, Any] | None = None,
    *,
    kube_version: str | None = None,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text.

    helm-python-sdk 0.2.2's Chart.render() does not pass kube_version or strict,
    though libhelm_c's render options take them; call the C function directly
    so .Capabilities.KubeVersion is the version under test and a template that
    reads a value the chart does not define fails (strict = missingkey=error).
    """
    opts: dict[str, Any] = {
        "name": release,
        "namespace": namespace,
        "is_install": True,
        "strict": True,
    }
    if kube_version is not None:
        opts["kube_version"] = kube_version
    rendered = _native.call_string(
        "helm_render", chart()._raw(), json.dumps(values or {}), json.dumps(opts)
    )
    return json.loads(rendered)


@dataclass
class Rendered:
    """The objects of one render, with lookups the tests use."""

    files: dict[str, str]
    objects: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for path, text in sorted(self.files.items()):
            if path.endswith("NOTES.txt"):
                continue
            for doc in yaml.safe_load_all(text):
                if doc is None:
                    continue
                assert isinstance(doc, dict), f"{path}: a document that is not a mapping: {doc!r}"
                doc.setdefault("__source__", path)
                self.objects.append(doc)

    @property
    def notes(self) -> str:
        return next((t for p, t in self.files.items() if p.endswith("NOTES.txt")), "")

    def manifests(self) -> Iterator[dict[str, Any]]:
        """The objects without the bookkeeping key."""
        for obj in self.objects:
            yield {k: v for k, v in obj.items() if k != "__source__"}

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}: " + ", ".join(
            f"{o['kind']}/{o['metadata']['name']}" for o in self.objects
        )
        return found[0]

    def maybe(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        return found[0] if found else None

    def names(self, kind: str) -> set[str]:
        return {o["metadata"]["name"] for o in self.all(kind)}


def render(values: dict[str, Any] | None = None, **kw: Any) -> Rendered:
    return Rendered(render_raw(values, **kw))


def name(component: str, release: str = RELEASE) -> str:
    """Object name of a component for the default release ("hami" -> hami-hami-rs-...)."""
    return f"{release}-hami-rs-{component}"


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any], cname: str, init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    found = [c for c in pod_spec(workload).get(key, []) if c["name"] == cname]
    assert len(found) == 1, f"container {cname} not in {workload['metadata']['name']}"
    return found[0]


def args_map(args: list[str]) -> dict[str, str | None]:
    """--flag=value / --flag arguments as a dict (None for bare flags)."""
    out: dict[str, str | None] = {}
    for a in args:
        assert a.startswith("--"), f"argument {a!r} is not a --flag"
        flag, sep, value = a.partition("=")
        assert flag not in out, f"{flag} given twice"
        out[flag] = value if sep else None
    return out


# ---------------------------------------------------------------- validation


class NotValidated(Exception):
    """No schema for this kind (a CRD such as cert-manager's)."""


def validate(obj: dict[str, Any], minor: int) -> str:
    """Validates one object strictly (unknown fields are errors) against the
    schemas of Kubernetes 1.<minor>; returns the schema version used."""
    try:
        return kv_utils.validate(obj, f"1.{minor}.0", strict=True)
    except kv_utils.SchemaNotFoundError as e:
        raise NotValidated(e.message) from None


def supported_minors() -> list[int]:
    """Minors kubernetes-validate ships schemas for."""
    return sorted({int(v.split(".")[1]) for v in kv_utils.all_versions()})


# -------------------------------------- KubeSchedulerConfiguration (v1) shape
#
# kube-scheduler rejects unknown fields in its config file (strict decoding),
# and no JSON schema ships for it, so the v1 field sets are written out here
# (k8s.io/kube-scheduler/config/v1 types.go).

KSC_FIELDS = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
    "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
    "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders",
    "delayCacheUntilActive",
}
LEADER_ELECTION_FIELDS = {
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
    "resourceName", "resourceNamespace",
}
PROFILE_FIELDS = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
EXTENDER_FIELDS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}
MANAGED_RESOURCE_FIELDS = {"name", "ignoredByScheduler"}


def check_scheduler_config(cfg: dict[str, Any]) -> None:
    def only(obj: dict[str, Any], allowed: set[str], where: str) -> None:
        unknown = set(obj) - allowed
        assert not unknown, f"{where}: fields kube-scheduler does not know: {sorted(unknown)}"

    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    only(cfg, KSC_FIELDS, "KubeSchedulerConfiguration")
    only(cfg.get("leaderElection", {}), LEADER_ELECTION_FIELDS, "leaderElection")
    for p in cfg.get("profiles", []):
        only(p, PROFILE_FIELDS, "profiles[]")
    for e in cfg.get("extenders", []):
        only(e, EXTENDER_FIELDS, "extenders[]")
        assert e["weight"] > 0, "an extender's weight must be positive"
        for r in e.get("managedResources", []):
            only(r, MANAGED_RESOURCE_FIELDS, "managedResources[]")
