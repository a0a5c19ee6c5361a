"""Every object the chart renders, for every value variant, is valid for every
supported Kubernetes minor (kubernetes-validate --strict: unknown fields fail),
and `helm lint --strict` is clean."""

from __future__ import annotations

import helm_python as helm
import pytest
import yaml

import chartlib
from conftest import VARIANTS

# Kinds that are not built into Kubernetes: checked by the render tests instead.
CRD_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
}


def test_kubernetes_validate_has_every_supported_minor() -> None:
    # If a kubernetes-validate upgrade dropped a minor, the loop below would
    # silently validate against an older schema set; fail loudly instead.
    missing = [m for m in chartlib.KUBE_MINORS if m not in chartlib.supported_minors()]
    assert not missing, f"kubernetes-validate ships no schemas for 1.{missing}"


@pytest.mark.parametrize("minor", chartlib.KUBE_MINORS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_objects_validate_strictly(variant: str, minor: int) -> None:
    out = chartlib.render(VARIANTS[variant], kube_version=f"v1.{minor}.0")
    assert out.objects, "rendered nothing"
    failures = []
    for obj in out.manifests():
        key = (obj["apiVersion"], obj["kind"])
        if key in CRD_KINDS:
            continue
        try:
            used = chartlib.validate(obj, minor)
        except chartlib.NotValidated as e:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: no schema ({e})")
            continue
        except Exception as e:  # jsonschema.ValidationError carries the path
            path = ".".join(str(p) for p in getattr(e, "path", []))
            msg = getattr(e, "message", str(e))
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {path}: {msg}")
            continue
        assert used == f"1.{minor}", f"validated against {used}, not 1.{minor}"
    assert not failures, "\n".join(failures)


def test_validator_rejects_what_kubernetes_rejects() -> None:
    # The check above can fail: an unknown field and a wrong type are caught.
    out = chartlib.render({}, kube_version="v1.30.0")
    dep = next(o for o in out.manifests() if o["kind"] == "Deployment")
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(Exception, match="livenessprobe"):
        chartlib.validate(bad, 30)
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(Exception):
        chartlib.validate(bad, 30)


@pytest.mark.parametrize("minor", chartlib.KUBE_MINORS)
def test_helm_lint_strict(minor: int) -> None:
    report = helm.lint(chartlib.CHART_DIR, strict=True, kube_version=f"v1.{minor}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


def test_kube_version_below_the_floor_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError, match="needs >=1.30"):
        chartlib.render({}, kube_version="v1.29.9")
