"""What renders the chart: helm-python-sdk must be Helm v4's own engine (Go
text/template + Sprig + Helm's include/tpl/required/fail), not an imitation."""

from __future__ import annotations

import hashlib
import json
import pathlib

import helm_python as helm
import pytest
from helm_python import _native

import chartlib


def test_it_is_helm_v4() -> None:
    assert helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version()


def scratch_chart(tmp_path: pathlib.Path, template: str) -> pathlib.Path:
    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("n: 3\nname: gpu\n")
    (chart / "templates" / "t.yaml").write_text(template)
    return chart


def render_scratch(chart: pathlib.Path, values: dict | None = None, strict: bool = False) -> str:
    with helm.Chart.load(chart) as c:
        opts = json.dumps({"name": "r", "namespace": "ns", "strict": strict, "kube_version": "v1.31.2"})
        out = json.loads(_native.call_string("helm_render", c._raw(), json.dumps(values or {}), opts))
    return out["c/templates/t.yaml"]


def test_go_templates_sprig_and_helm_functions(tmp_path: pathlib.Path) -> None:
    chart = scratch_chart(
        tmp_path,
        '{{- define "x" }}[{{ . }}]{{ end -}}\n'
        "a: {{ .Values.n | add 2 }}\n"
        "b: {{ include \"x\" .Values.name | upper }}\n"
        "c: {{ .Capabilities.KubeVersion.Minor }}\n"
        "d: {{ .Release.Namespace }}/{{ .Release.Name }}\n"
        "e: {{ printf \"%05d\" 42 }}\n"
        "f: {{ \"hi\" | sha256sum | trunc 8 }}\n",
    )
    assert render_scratch(chart, {"n": 5}).splitlines() == [
        "a: 7",
        "b: [GPU]",
        "c: 31",
        "d: ns/r",
        "e: 00042",
        f"f: {hashlib.sha256(b'hi').hexdigest()[:8]}",
    ]


def test_strict_mode_refuses_undefined_values(tmp_path: pathlib.Path) -> None:
    chart = scratch_chart(tmp_path, "x: {{ .Values.missing.key }}\n")
    with pytest.raises(helm.HelmRenderError, match="nil pointer|no entry|missing"):
        render_scratch(chart, strict=True)


def test_chart_checksums_are_helms_sha256_of_the_included_template(default: chartlib.Rendered) -> None:
    text = default.files["hami-rs/templates/device-config.yaml"]
    ds = default.get("DaemonSet", chartlib.name("device-plugin"))
    annotation = ds["spec"]["template"]["metadata"]["annotations"]["checksum/device-config"]
    assert annotation == hashlib.sha256(text.encode()).hexdigest()
