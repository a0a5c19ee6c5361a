"""Key facts of the rendered chart: the extender wiring, RBAC per component,
probes, images, the webhook's selectors and TLS, the device plugin's mounts."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import pytest
import yaml

import chartlib
from chartlib import Rendered, args_map, container, name, pod_spec
from conftest import VARIANTS

NS = chartlib.NAMESPACE
NVIDIA_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
]


def scheduler_config(out: Rendered) -> dict[str, Any]:
    cm = out.get("ConfigMap", name("scheduler"))
    return yaml.safe_load(cm["data"]["config.yaml"])


def device_config(out: Rendered) -> dict[str, Any]:
    cm = out.get("ConfigMap", name("device-config"))
    return yaml.safe_load(cm["data"]["device-config.yaml"])


def port_of(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


# ------------------------------------------------------------ scheduler wiring


def test_extender_is_called_on_loopback_with_hami_verbs(default: Rendered) -> None:
    cfg = scheduler_config(default)
    chartlib.check_scheduler_config(cfg)
    assert cfg["profiles"] == [{"schedulerName": "hami-scheduler"}]
    [ext] = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888"
    assert ext["filterVerb"] == "filter"
    assert ext["bindVerb"] == "bind"
    assert ext["nodeCacheCapable"] is True
    assert ext["weight"] == 1
    assert ext["httpTimeout"] == "30s"
    assert ext["enableHTTPS"] is False
    assert "prioritizeVerb" not in ext and "preemptVerb" not in ext


def test_managed_resources_are_every_resource_name_ignored_by_scheduler(
    default: Rendered,
) -> None:
    [ext] = scheduler_config(default)["extenders"]
    assert [r["name"] for r in ext["managedResources"]] == NVIDIA_RESOURCES
    assert all(r["ignoredByScheduler"] is True for r in ext["managedResources"])


def test_custom_resource_names_reach_scheduler_webhook_and_plugin_config(
    rendered: dict[str, Rendered],
) -> None:
    out = rendered["custom-resources"]
    cfg = scheduler_config(out)
    [ext] = cfg["extenders"]
    assert [r["name"] for r in ext["managedResources"]] == [
        "example.com/vgpu",
        "example.com/vgpu-memory",
        "example.com/vgpu-cores",
        "example.com/vgpu-memory-percentage",
        "example.com/vgpu-priority",
        "hygon.com/dcunum",
    ]
    assert cfg["profiles"][0]["schedulerName"] == "gpu-share"
    assert cfg["leaderElection"]["resourceName"] == "gpu-share"
    nv = device_config(out)["nvidia"]
    assert nv["resourceCountName"] == "example.com/vgpu"
    assert nv["resourceMemoryName"] == "example.com/vgpu-memory"
    assert nv["resourceMemoryPercentageName"] == "example.com/vgpu-memory-percentage"
    assert nv["resourceCoreName"] == "example.com/vgpu-cores"
    assert nv["resourcePriorityName"] == "example.com/vgpu-priority"
    sched = out.get("Deployment", name("scheduler"))
    assert args_map(container(sched, "extender")["args"])["--scheduler-name"] == "gpu-share"
    webhook = out.get("Deployment", name("webhook"))
    assert args_map(container(webhook, "webhook")["args"])["--scheduler-name"] == "gpu-share"
    role = out.get("Role", name("scheduler"))
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == ["gpu-share"] for r in named)


def test_extender_args_match_the_scheduler_config(default: Rendered) -> None:
    dep = default.get("Deployment", name("scheduler"))
    ext = container(dep, "extender")
    args = args_map(ext["args"])
    url = scheduler_config(default)["extenders"][0]["urlPrefix"]
    assert url == f"http://{args['--http_bind']}"
    assert args["--scheduler-name"] == "hami-scheduler"
    assert args["--node-scheduler-policy"] == "binpack"
    assert args["--gpu-scheduler-policy"] == "spread"
    assert args["--node-lock-timeout"] == "5m"
    assert args["--metrics-bind-address"] == ":9395"
    assert args["--device-config-file"] == "/etc/hami-rs/device-config/device-config.yaml"
    assert "--leader-elect" in args and args["--leader-elect"] is None
    assert args["--leader-elect-resource-name"] == "hami-scheduler"
    assert args["--leader-elect-resource-namespace"] == NS
    assert "--cert_file" not in args, "loopback HTTP needs no certificate"
    env = {e["name"]: e for e in ext["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_leader_election_follows_kube_schedulers_lease(default: Rendered) -> None:
    le = scheduler_config(default)["leaderElection"]
    assert le == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "hami-scheduler",
        "resourceNamespace": NS,
    }


def test_without_leader_election_neither_container_elects(rendered: dict[str, Rendered]) -> None:
    out = rendered["no-leader-election"]
    assert scheduler_config(out)["leaderElection"]["leaderElect"] is False
    args = args_map(container(out.get("Deployment", name("scheduler")), "extender")["args"])
    assert not any(a.startswith("--leader-elect") for a in args)
    # No surge either: an old and a new extender without a Lease would each take the
    # other's node locks for abandoned.
    assert out.get("Deployment", name("scheduler"))["spec"]["strategy"] == {"type": "Recreate"}


def test_with_leader_election_the_scheduler_rolls(default: Rendered) -> None:
    assert "strategy" not in default.get("Deployment", name("scheduler"))["spec"]


def test_spread_policy_reaches_the_extender(rendered: dict[str, Rendered]) -> None:
    dep = rendered["spread"].get("Deployment", name("scheduler"))
    args = args_map(container(dep, "extender")["args"])
    assert args["--node-scheduler-policy"] == "spread"
    assert args["--gpu-scheduler-policy"] == "binpack"


def test_kube_scheduler_runs_the_rendered_config(default: Rendered) -> None:
    dep = default.get("Deployment", name("scheduler"))
    ks = container(dep, "kube-scheduler")
    assert ks["command"] == ["kube-scheduler"]
    config_arg = next(a for a in ks["args"] if a.startswith("--config="))
    path = config_arg.split("=", 1)[1]
    mount = next(m for m in ks["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    vol = next(v for v in pod_spec(dep)["volumes"] if v["name"] == mount["name"])
    assert vol["configMap"]["name"] == name("scheduler")
    assert path.rsplit("/", 1)[1] in default.get("ConfigMap", name("scheduler"))["data"]


# ---------------------------------------------------------------------- images


def test_default_images(default: Rendered) -> None:
    images = {
        (w["metadata"]["name"], c["name"]): c["image"]
        for w in default.all("Deployment") + default.all("DaemonSet") + default.all("Job")
        for c in pod_spec(w).get("initContainers", []) + pod_spec(w)["containers"]
    }
    assert images == {
        (name("scheduler"), "kube-scheduler"): "registry.k8s.io/kube-scheduler:v1.37.0",
        (name("scheduler"), "extender"): "ghcr.io/hami-rs/hami-scheduler:v0.1.0",
        (name("webhook"), "webhook"): "ghcr.io/hami-rs/hami-webhook:v0.1.0",
        (name("certgen-create-secret"), "certgen"): "ghcr.io/hami-rs/hami-webhook:v0.1.0",
        (name("certgen-patch-webhook"), "certgen"): "ghcr.io/hami-rs/hami-webhook:v0.1.0",
        (name("device-plugin"), "hami-core-install"): (
            "ghcr.io/hami-rs/hami-device-plugin-nvidia:v0.1.0"
        ),
        (name("device-plugin"), "device-plugin"): "ghcr.io/hami-rs/hami-device-plugin-nvidia:v0.1.0",
        # The monitor ships in the device plugin's image.
        (name("device-plugin"), "vgpu-monitor"): "ghcr.io/hami-rs/hami-device-plugin-nvidia:v0.1.0",
    }


def test_kube_scheduler_tag_follows_the_cluster_version() -> None:
    for version, tag in [("v1.30.2", "v1.30.2"), ("v1.31.4+k3s1", "v1.31.4"), ("v1.33.1-eks-8cce635", "v1.33.1")]:
        out = chartlib.render({}, kube_version=version)
        ks = container(out.get("Deployment", name("scheduler")), "kube-scheduler")
        assert ks["image"] == f"registry.k8s.io/kube-scheduler:{tag}", version


def test_mirror_registry_tags_and_pull_secrets(rendered: dict[str, Rendered]) -> None:
    out = rendered["mirror-and-extras"]
    for w in out.all("Deployment") + out.all("DaemonSet") + out.all("Job"):
        spec = pod_spec(w)
        assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["image"].startswith("mirror.example.com/"), c["image"]
            if c["name"] == "kube-scheduler":
                assert c["image"] == "mirror.example.com/kube-scheduler:v1.33.7"
            else:
                assert c["image"].endswith(":v9.9.9"), c["image"]
    for obj in out.objects:
        assert obj["metadata"]["labels"]["team"] == "gpu", obj["metadata"]["name"]


# ------------------------------------------------------------------------ RBAC


def rules_of(out: Rendered, sa: str) -> dict[str, list[dict[str, Any]]]:
    """Every rule the chart grants ServiceAccount `sa`, by where it applies
    ("cluster" or a namespace), plus bound roles the chart does not define."""
    granted: dict[str, list[dict[str, Any]]] = {}
    for binding in out.all("ClusterRoleBinding") + out.all("RoleBinding"):
        subjects = binding.get("subjects", [])
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NS for s in subjects):
            continue
        ref = binding["roleRef"]
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        role = out.maybe(ref["kind"], ref["name"])
        if role is None:
            granted.setdefault("builtin", []).append({"role": ref["name"], "scope": scope})
            continue
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == scope, "RoleBinding to a Role of another namespace"
        granted.setdefault(scope, []).extend(role["rules"])
    return granted


def normalise(rules: list[dict[str, Any]]) -> set[tuple]:
    out = set()
    for r in rules:
        for group in r["apiGroups"]:
            for res in r["resources"]:
                for verb in r["verbs"]:
                    out.add((group, res, verb, tuple(r.get("resourceNames", ()))))
    return out


def grant(groups, resources, verbs, names=()) -> set[tuple]:
    return {(g, r, v, tuple(names)) for g in groups for r in resources for v in verbs}


def test_scheduler_rbac_is_exactly_what_the_extender_and_kube_scheduler_use(default: Rendered) -> None:
    got = rules_of(default, name("scheduler"))
    assert normalise(got["cluster"]) == (
        grant([""], ["pods"], ["get", "list", "watch", "patch"])
        | grant([""], ["pods/binding"], ["create"])
        | grant([""], ["nodes"], ["get", "list", "watch", "patch"])
        | grant(["", "events.k8s.io"], ["events"], ["create", "patch"])
        | grant([""], ["resourcequotas"], ["get", "list", "watch"])
    )
    assert normalise(got[NS]) == (
        grant(["coordination.k8s.io"], ["leases"], ["create", "get", "list", "watch"])
        | grant(["coordination.k8s.io"], ["leases"], ["update"], ["hami-scheduler"])
    )
    assert sorted(got["builtin"], key=lambda b: b["role"]) == [
        {"role": "extension-apiserver-authentication-reader", "scope": "kube-system"},
        {"role": "system:kube-scheduler", "scope": "cluster"},
        {"role": "system:volume-scheduler", "scope": "cluster"},
    ]


def test_device_plugin_rbac(default: Rendered) -> None:
    got = rules_of(default, name("device-plugin"))
    assert set(got) == {"cluster"}
    assert normalise(got["cluster"]) == (
        grant([""], ["nodes"], ["get", "patch"])
        | grant([""], ["pods"], ["get", "list", "watch", "patch"])
        | grant(["", "events.k8s.io"], ["events"], ["create", "patch"])
    )


def test_webhook_reads_only_resourcequotas(default: Rendered) -> None:
    got = rules_of(default, name("webhook"))
    assert set(got) == {"cluster"}
    assert normalise(got["cluster"]) == grant([""], ["resourcequotas"], ["get", "list", "watch"])
    sa = default.get("ServiceAccount", name("webhook"))
    assert sa["automountServiceAccountToken"] is True
    deployment = default.get("Deployment", name("webhook"))
    assert pod_spec(deployment)["automountServiceAccountToken"] is True
    assert args_map(container(deployment, "webhook")["args"])["--quota-check"] == "true"


def test_webhook_without_the_quota_rule_has_no_api_access() -> None:
    out = chartlib.render({"scheduler": {"admissionWebhook": {"quotaCheck": "false"}}})
    assert rules_of(out, name("webhook")) == {}
    sa = out.get("ServiceAccount", name("webhook"))
    assert sa["automountServiceAccountToken"] is False
    deployment = out.get("Deployment", name("webhook"))
    assert pod_spec(deployment)["automountServiceAccountToken"] is False
    assert args_map(container(deployment, "webhook")["args"])["--quota-check"] == "false"


def test_certgen_rbac_is_limited_to_its_secret_and_webhook(default: Rendered) -> None:
    got = rules_of(default, name("certgen"))
    assert normalise(got[NS]) == (
        grant([""], ["secrets"], ["create"])
        | grant([""], ["secrets"], ["get", "update"], [name("webhook-tls")])
    )
    assert normalise(got["cluster"]) == grant(
        ["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations"], ["get", "update"], [name("webhook")]
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_wildcards_and_every_subject_exists(rendered: dict[str, Rendered], variant: str) -> None:
    out = rendered[variant]
    for role in out.all("ClusterRole") + out.all("Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{role['metadata']['name']}: wildcard in {key}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    accounts = out.names("ServiceAccount")
    for binding in out.all("ClusterRoleBinding") + out.all("RoleBinding"):
        for s in binding["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["name"] in accounts, s
    for w in out.all("Deployment") + out.all("DaemonSet") + out.all("Job"):
        assert pod_spec(w)["serviceAccountName"] in accounts


def test_only_certgen_touches_secrets(default: Rendered) -> None:
    for role in default.all("ClusterRole") + default.all("Role"):
        if role["metadata"]["name"] == name("certgen"):
            continue
        for rule in role["rules"]:
            assert "secrets" not in rule["resources"], role["metadata"]["name"]


# ---------------------------------------------------------------------- probes


def declared_ports(c: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in c.get("ports", [])}


def probe_port(c: dict[str, Any], probe: dict[str, Any]) -> int:
    port = probe["httpGet"]["port"]
    return declared_ports(c)[port] if isinstance(port, str) else port


def test_probes_hit_the_admin_ports(default: Rendered) -> None:
    sched = default.get("Deployment", name("scheduler"))
    ext = container(sched, "extender")
    metrics = port_of(args_map(ext["args"])["--metrics-bind-address"])
    assert ext["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert ext["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(ext, ext[kind]) == metrics

    ks = container(sched, "kube-scheduler")
    for kind in ("livenessProbe", "startupProbe"):
        assert ks[kind]["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}

    wh = container(default.get("Deployment", name("webhook")), "webhook")
    admin = port_of(args_map(wh["args"])["--admin-address"])
    assert wh["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert wh["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(wh, wh[kind]) == admin == 9444

    dp = container(default.get("DaemonSet", name("device-plugin")), "device-plugin")
    admin = port_of(args_map(dp["args"])["--admin-address"])
    assert dp["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert dp["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(dp, dp[kind]) == admin == 9396

    mon = container(default.get("DaemonSet", name("device-plugin")), "vgpu-monitor")
    metrics = port_of(args_map(mon["args"])["--metrics-bind-address"])
    assert mon["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert mon["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(mon, mon[kind]) == metrics == 9394


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_long_running_container_has_probes_and_resources(
    rendered: dict[str, Rendered], variant: str
) -> None:
    out = rendered[variant]
    for w in out.all("Deployment") + out.all("DaemonSet"):
        spec = pod_spec(w)
        for c in spec["containers"]:
            assert "livenessProbe" in c, f"{w['metadata']['name']}/{c['name']}"
            assert "readinessProbe" in c or c["name"] == "kube-scheduler"
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        for c in spec.get("initContainers", []):
            assert c["resources"]["requests"]


# --------------------------------------------------------------------- webhook


def test_webhook_configuration(default: Rendered) -> None:
    mwc = default.get("MutatingWebhookConfiguration", name("webhook"))
    [hook] = mwc["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 10
    assert hook["rules"] == [
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}
    ]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert hook["namespaceSelector"] == {"matchExpressions": [ignore]}
    assert hook["objectSelector"] == {"matchExpressions": [ignore]}
    assert "caBundle" not in hook["clientConfig"], "certgen writes it after install"

    svc_ref = hook["clientConfig"]["service"]
    assert svc_ref == {"name": name("webhook"), "namespace": NS, "path": "/mutate", "port": 443}
    svc = default.get("Service", svc_ref["name"])
    [port] = [p for p in svc["spec"]["ports"] if p["port"] == svc_ref["port"]]
    wh = container(default.get("Deployment", name("webhook")), "webhook")
    bind = port_of(args_map(wh["args"])["--bind-address"])
    assert declared_ports(wh)[port["targetPort"]] == bind
    pod_labels = default.get("Deployment", name("webhook"))["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_webhook_selectors_from_hami_style_values(rendered: dict[str, Rendered]) -> None:
    out = rendered["hami-style-values"]
    [hook] = out.get("MutatingWebhookConfiguration", name("webhook"))["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "istio-system"]},
        ]
    }
    assert hook["objectSelector"] == {
        "matchExpressions": [
            {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
            {"key": "team", "operator": "In", "values": ["ml"]},
        ]
    }
    args = args_map(container(out.get("Deployment", name("webhook")), "webhook")["args"])
    assert args["--force-overwrite-default-scheduler"] == "false"
    nv = device_config(out)["nvidia"]
    assert nv["overwriteEnv"] is True
    assert nv["disableCoreLimit"] is True
    assert nv["gpuCorePolicy"] == "force"
    assert nv["libCudaLogLevel"] == "4"
    assert nv["deviceSplitCount"] == 4
    assert nv["deviceMemoryScaling"] == 1.5
    ext = args_map(container(out.get("Deployment", name("scheduler")), "extender")["args"])
    assert ext["--node-label-selector"] == "gpu=on,zone=a"
    node_cfg = json.loads(out.get("ConfigMap", name("node-config"))["data"]["config.json"])
    assert node_cfg["nodeconfig"][0]["devicesplitcount"] == 5


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_chart_pod_is_ignored_by_the_webhook(rendered: dict[str, Rendered], variant: str) -> None:
    # With failurePolicy Fail, a webhook that had to admit its own pods (or the
    # certgen Job that makes its certificate) could never start.
    out = rendered[variant]
    for w in out.all("Deployment") + out.all("DaemonSet") + out.all("Job"):
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert labels.get("hami.io/webhook") == "ignore", w["metadata"]["name"]


def test_webhook_args(default: Rendered) -> None:
    wh = container(default.get("Deployment", name("webhook")), "webhook")
    assert args_map(wh["args"]) == {
        "--bind-address": "0.0.0.0:9443",
        "--tls-cert-file": "/tls/tls.crt",
        "--tls-key-file": "/tls/tls.key",
        "--admin-address": "0.0.0.0:9444",
        "--scheduler-name": "hami-scheduler",
        "--device-config-file": "/etc/hami-rs/device-config/device-config.yaml",
        "--force-overwrite-default-scheduler": "true",
        "--scheduler-owned-annotations": "deny",
        "--deny-privileged": "true",
        "--quota-check": "true",
    }
    mounts = {m["mountPath"]: m["name"] for m in wh["volumeMounts"]}
    vols = {v["name"]: v for v in pod_spec(default.get("Deployment", name("webhook")))["volumes"]}
    assert vols[mounts["/tls"]]["secret"]["secretName"] == name("webhook-tls")


def test_webhook_disabled_renders_no_webhook_objects(rendered: dict[str, Rendered]) -> None:
    out = rendered["webhook-disabled"]
    assert not out.all("MutatingWebhookConfiguration")
    assert not out.all("Job")
    assert name("webhook") not in out.names("Deployment")
    assert name("webhook") not in out.names("Service")
    assert name("certgen") not in out.names("ClusterRole")
    assert name("scheduler") in out.names("Deployment")
    assert "must set spec.schedulerName" in out.notes


# ------------------------------------------------------------------------- TLS


def test_certgen_hooks_create_the_secret_then_patch_the_ca_bundle(default: Rendered) -> None:
    pre = default.get("Job", name("certgen-create-secret"))
    post = default.get("Job", name("certgen-patch-webhook"))
    assert pre["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert post["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    common = {
        "--namespace": NS,
        "--service-name": name("webhook"),
        "--secret-name": name("webhook-tls"),
        "--validity-days": "3650",
    }
    pre_c = container(pre, "certgen")
    post_c = container(post, "certgen")
    assert pre_c["args"][0] == post_c["args"][0] == "certgen"
    assert args_map(pre_c["args"][1:]) == common
    assert args_map(post_c["args"][1:]) == {**common, "--webhook-config-name": name("webhook")}
    # The names certgen uses are the objects the chart makes.
    assert default.get("Service", name("webhook"))
    assert default.get("MutatingWebhookConfiguration", name("webhook"))
    job_weight = int(pre["metadata"]["annotations"]["helm.sh/hook-weight"])
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        ann = default.get(kind, name("certgen"))["metadata"]["annotations"]
        hooks = set(ann["helm.sh/hook"].split(","))
        assert hooks == {"pre-install", "pre-upgrade", "post-install", "post-upgrade"}, kind
        assert int(ann["helm.sh/hook-weight"]) < job_weight, f"{kind} must exist before the Job"
        assert "hook-succeeded" in ann["helm.sh/hook-delete-policy"]


def test_cert_manager_replaces_certgen(rendered: dict[str, Rendered]) -> None:
    out = rendered["cert-manager"]
    assert not out.all("Job")
    assert name("certgen") not in out.names("ClusterRole")
    issuer = out.get("Issuer", name("webhook"))
    assert issuer["spec"] == {"selfSigned": {}}
    cert = out.get("Certificate", name("webhook"))
    assert cert["spec"]["secretName"] == name("webhook-tls")
    assert cert["spec"]["issuerRef"] == {"name": name("webhook"), "kind": "Issuer"}
    svc = name("webhook")
    # The same names certgen puts in its certificate (crates/webhook certgen::dns_names).
    assert cert["spec"]["dnsNames"] == [svc, f"{svc}.{NS}", f"{svc}.{NS}.svc", f"{svc}.{NS}.svc.cluster.local"]
    mwc = out.get("MutatingWebhookConfiguration", name("webhook"))
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/{name('webhook')}"


def test_own_certificate_sets_the_ca_bundle(rendered: dict[str, Rendered]) -> None:
    out = rendered["own-certificate"]
    assert not out.all("Job")
    [hook] = out.get("MutatingWebhookConfiguration", name("webhook"))["webhooks"]
    assert hook["clientConfig"]["caBundle"] == VARIANTS["own-certificate"]["scheduler"]["admissionWebhook"]["caBundle"]


# --------------------------------------------------------------- device plugin


def test_device_plugin_daemonset(default: Rendered) -> None:
    ds = default.get("DaemonSet", name("device-plugin"))
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"gpu": "on"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    vols = {v["name"]: v for v in spec["volumes"]}
    dp = container(ds, "device-plugin")
    mounts = {m["name"]: m["mountPath"] for m in dp["volumeMounts"]}
    # The kubelet's socket directory and HAMi-core's directory appear at their
    # node paths: the plugin hands node paths to the kubelet in Allocate.
    assert vols["device-plugins"]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert vols["hami-core"]["hostPath"] == {"path": "/usr/local/vgpu", "type": "DirectoryOrCreate"}
    assert mounts["hami-core"] == "/usr/local/vgpu"
    assert dp["securityContext"]["privileged"] is True
    args = args_map(dp["args"])
    assert args == {
        "--device-plugin-path": "/var/lib/kubelet/device-plugins",
        "--config-file": "/etc/hami-rs/device-config/device-config.yaml",
        "--node-config-file": "/config/config.json",
        "--hook-path": "/usr/local",
        "--backend": "nvml",
        "--admin-address": "0.0.0.0:9396",
    }
    env = {e["name"]: e for e in dp["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Both config files are mounted where the args say.
    for flag, cm in (("--config-file", name("device-config")), ("--node-config-file", name("node-config"))):
        path = args[flag]
        vol_name = next(n for n, p in mounts.items() if path.startswith(p + "/"))
        assert vols[vol_name]["configMap"]["name"] == cm
        assert path.rsplit("/", 1)[1] in default.get("ConfigMap", cm)["data"]


def test_hami_core_is_installed_before_the_plugin_starts(default: Rendered) -> None:
    ds = default.get("DaemonSet", name("device-plugin"))
    init = container(ds, "hami-core-install", init=True)
    assert init["command"] == ["/usr/local/bin/hami-vgpu-init"]
    assert init["args"] == ["/usr/local/vgpu", "/usr/local/vgpu/libvgpu.so"]
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert mounts == {"hami-core": "/usr/local/vgpu", "vgpu-lock": "/tmp/vgpulock"}
    assert init["securityContext"].get("privileged") is not True


def test_hook_path_moves_every_hami_core_path() -> None:
    out = chartlib.render({"global": {"gpuHookPath": "/opt/hami/"}, "devicePlugin": {"pluginPath": "/var/lib/k0s/kubelet/device-plugins"}})
    ds = out.get("DaemonSet", name("device-plugin"))
    vols = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert vols["hami-core"]["hostPath"]["path"] == "/opt/hami/vgpu"
    assert vols["device-plugins"]["hostPath"]["path"] == "/var/lib/k0s/kubelet/device-plugins"
    args = args_map(container(ds, "device-plugin")["args"])
    assert args["--hook-path"] == "/opt/hami"
    assert args["--device-plugin-path"] == "/var/lib/k0s/kubelet/device-plugins"
    assert container(ds, "hami-core-install", init=True)["args"] == ["/opt/hami/vgpu", "/opt/hami/vgpu/libvgpu.so"]


def test_fake_backend_needs_no_privilege(rendered: dict[str, Rendered]) -> None:
    out = rendered["fake-backend"]
    ds = out.get("DaemonSet", name("device-plugin"))
    dp = container(ds, "device-plugin")
    args = args_map(dp["args"])
    assert args["--backend"] == "fake"
    sc = dp["securityContext"]
    assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    path = args["--fake-devices"]
    mount = next(m for m in dp["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    vol = next(v for v in pod_spec(ds)["volumes"] if v["name"] == mount["name"])
    cm = out.get("ConfigMap", vol["configMap"]["name"])
    assert cm["data"][path.rsplit("/", 1)[1]].strip() == VARIANTS["fake-backend"]["devicePlugin"]["fakeDevices"].strip()
    # The monitor reads the same device file (host series) and touches no device either.
    mon = container(ds, "vgpu-monitor")
    margs = args_map(mon["args"])
    assert (margs["--backend"], margs["--fake-devices"]) == ("fake", path)
    assert any(path.startswith(m["mountPath"] + "/") and m["name"] == mount["name"] for m in mon["volumeMounts"])
    msc = mon["securityContext"]
    assert msc.get("privileged") is not True and msc["allowPrivilegeEscalation"] is False
    assert msc["capabilities"]["drop"] == ["ALL"]


def test_vgpu_monitor_reads_the_directories_the_plugin_creates(default: Rendered) -> None:
    ds = default.get("DaemonSet", name("device-plugin"))
    vols = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    mon = container(ds, "vgpu-monitor")
    assert mon["command"] == ["/usr/local/bin/hami-vgpu-monitor"]
    assert args_map(mon["args"]) == {"--metrics-bind-address": "0.0.0.0:9394", "--backend": "nvml"}
    env = {e["name"]: e for e in mon["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOOK_PATH"]["value"] == "/usr/local/vgpu"
    assert env["HAMI_RESYNC_INTERVAL"]["value"] == "5m"
    # The plugin's Allocate creates <hook-path>/vgpu/containers/<podUID>_<container>;
    # the monitor reads <HOOK_PATH>/containers at the same node path.
    plugin_hook = args_map(container(ds, "device-plugin")["args"])["--hook-path"]
    containers_dir = f"{plugin_hook}/vgpu/containers"
    assert env["HOOK_PATH"]["value"] + "/containers" == containers_dir
    mounts = {m["name"]: m for m in mon["volumeMounts"]}
    assert mounts["vgpu-containers"]["mountPath"] == containers_dir
    assert not mounts["vgpu-containers"].get("readOnly"), "the feedback writes into the files"
    assert vols["vgpu-containers"]["hostPath"] == {"path": containers_dir, "type": "DirectoryOrCreate"}
    # The device plugin's MIG apply lock (/tmp/hami) pauses the monitor: /tmp is shared.
    plugin_tmp = next(m for m in container(ds, "device-plugin")["volumeMounts"] if m["mountPath"] == "/tmp")
    assert mounts["tmp"]["mountPath"] == "/tmp" and plugin_tmp["name"] == "tmp"
    assert mon["securityContext"]["privileged"] is True, "NVML needs the GPUs' device nodes"
    assert {p["name"]: p["containerPort"] for p in mon["ports"]} == {"metrics": 9394}
    assert mon["resources"]["limits"]["memory"] == "128Mi"


def test_monitor_service_follows_hamis_and_has_no_servicemonitor_by_default(default: Rendered) -> None:
    svc = default.get("Service", name("device-plugin-monitor"))
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "monitorport", "port": 31992, "targetPort": "metrics", "protocol": "TCP"}]
    labels = default.get("DaemonSet", name("device-plugin"))["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert not default.all("ServiceMonitor")


def test_monitor_options(rendered: dict[str, Rendered]) -> None:
    out = rendered["monitor-options"]
    ds = out.get("DaemonSet", name("device-plugin"))
    mon = container(ds, "vgpu-monitor")
    assert mon["image"] == "registry.example.com/gpu/hami-vgpu-monitor:v1.2.3"
    assert args_map(mon["args"]) == {
        "--metrics-bind-address": "0.0.0.0:9494",
        "--backend": "nvml",
        "--legacy-metrics": None,
        "--feedback-interval": "10s",
    }
    assert {e["name"]: e.get("value") for e in mon["env"]}["SCAN_INTERVAL"] == "10s"
    svc = out.get("Service", name("device-plugin-monitor"))
    assert svc["spec"]["type"] == "NodePort"
    [port] = svc["spec"]["ports"]
    assert (port["port"], port["nodePort"], port["targetPort"]) == (31999, 31999, "metrics")
    assert {p["name"]: p["containerPort"] for p in mon["ports"]}["metrics"] == 9494
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    sm = out.get("ServiceMonitor", name("device-plugin-monitor"))
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    assert sm["spec"]["endpoints"] == [
        {"port": "monitorport", "path": "/metrics", "honorLabels": True, "interval": "15s"}
    ]


def test_monitor_from_hami_style_values(rendered: dict[str, Rendered]) -> None:
    out = rendered["hami-style-values"]
    mon = container(out.get("DaemonSet", name("device-plugin")), "vgpu-monitor")
    assert "--legacy-metrics" in args_map(mon["args"])
    # HAMi's legacyMetrics covers the scheduler's series too.
    ext = container(out.get("Deployment", name("scheduler")), "extender")
    assert "--legacy-metrics" in args_map(ext["args"])
    assert {e["name"]: e.get("value") for e in mon["env"]}["HAMI_RESYNC_INTERVAL"] == "10m"
    assert out.get("Service", name("device-plugin-monitor"))["spec"]["ports"][0]["nodePort"] == 31992


def test_monitor_can_be_left_out(rendered: dict[str, Rendered]) -> None:
    out = rendered["monitor-disabled"]
    ds = out.get("DaemonSet", name("device-plugin"))
    assert [c["name"] for c in pod_spec(ds)["containers"]] == ["device-plugin"]
    assert "vgpu-containers" not in {v["name"] for v in pod_spec(ds)["volumes"]}
    assert name("device-plugin-monitor") not in out.names("Service")


def test_runtime_class_register_interval_and_host_pid(rendered: dict[str, Rendered]) -> None:
    out = rendered["mirror-and-extras"]
    rc = out.get("RuntimeClass", "nvidia")
    assert rc["handler"] == "nvidia"
    ds = out.get("DaemonSet", name("device-plugin"))
    assert pod_spec(ds)["runtimeClassName"] == "nvidia"
    assert pod_spec(ds)["hostPID"] is True
    assert args_map(container(ds, "device-plugin")["args"])["--register-interval"] == "45s"
    assert device_config(out)["nvidia"]["runtimeClassName"] == "nvidia"
    for w in out.all("Deployment") + out.all("DaemonSet"):
        for c in pod_spec(w)["containers"]:
            if c["name"] == "kube-scheduler":
                continue
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["LOG_FORMAT"] == "json" and env["LOG_LEVEL"] == "debug", c["name"]


# ---------------------------------------------------------- configs and checks


def test_device_config_defaults_are_hamis(default: Rendered) -> None:
    assert device_config(default) == {
        "nvidia": {
            "resourceCountName": "nvidia.com/gpu",
            "resourceMemoryName": "nvidia.com/gpumem",
            "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
            "resourceCoreName": "nvidia.com/gpucores",
            "resourcePriorityName": "nvidia.com/priority",
            "overwriteEnv": False,
            "defaultMemory": 0,
            "defaultCores": 0,
            "defaultGPUNum": 1,
            "memoryFactor": 1,
            "deviceSplitCount": 10,
            "deviceMemoryScaling": 1,
            "deviceCoreScaling": 1,
            "preConfiguredDeviceMemory": 0,
            "enableNumaTopology": False,
            "disableCoreLimit": False,
            "gpuCorePolicy": "default",
            "libCudaLogLevel": "1",
            "runtimeClassName": "",
        }
    }
    assert json.loads(default.get("ConfigMap", name("node-config"))["data"]["config.json"]) == {"nodeconfig": []}


def test_device_config_content_replaces_everything() -> None:
    content = "nvidia:\n  resourceCountName: example.com/gpu\n  memoryFactor: 1024\n"
    out = chartlib.render({"device-config": {"content": content}})
    assert out.get("ConfigMap", name("device-config"))["data"]["device-config.yaml"] == content


def test_changing_the_device_config_restarts_the_pods() -> None:
    a = chartlib.render({})
    b = chartlib.render({"devicePlugin": {"deviceSplitCount": 4}})
    for kind, comp in (("Deployment", "scheduler"), ("Deployment", "webhook"), ("DaemonSet", "device-plugin")):
        ann_a = a.get(kind, name(comp))["spec"]["template"]["metadata"]["annotations"]
        ann_b = b.get(kind, name(comp))["spec"]["template"]["metadata"]["annotations"]
        assert ann_a["checksum/device-config"] != ann_b["checksum/device-config"], comp


def test_pdbs_only_with_more_than_one_replica(rendered: dict[str, Rendered]) -> None:
    assert not rendered["default"].all("PodDisruptionBudget")
    out = rendered["ha"]
    for comp in ("scheduler", "webhook"):
        pdb = out.get("PodDisruptionBudget", name(comp))
        assert pdb["spec"]["minAvailable"] == 1
        dep = out.get("Deployment", name(comp))
        assert pdb["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert out.get("Deployment", name("webhook"))["spec"]["replicas"] == 3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_security_contexts(rendered: dict[str, Rendered], variant: str) -> None:
    out = rendered[variant]
    for w in out.all("Deployment") + out.all("Job"):
        spec = pod_spec(w)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"]
    for ds in out.all("DaemonSet"):
        for c in pod_spec(ds).get("initContainers", []) + pod_spec(ds)["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_volume_source_is_rendered(rendered: dict[str, Rendered], variant: str) -> None:
    out = rendered[variant]
    for w in out.all("Deployment") + out.all("DaemonSet") + out.all("Job"):
        for v in pod_spec(w).get("volumes", []):
            if "configMap" in v:
                assert v["configMap"]["name"] in out.names("ConfigMap"), v
            if "secret" in v:
                # Made at install time by certgen / cert-manager / the user.
                assert v["secret"]["secretName"] == name("webhook-tls")
        mounted = {m["name"] for c in pod_spec(w)["containers"] + pod_spec(w).get("initContainers", []) for m in c.get("volumeMounts", [])}
        assert mounted <= {v["name"] for v in pod_spec(w).get("volumes", [])}


def test_external_node_config_is_used_instead_of_ours() -> None:
    out = chartlib.render({"devicePlugin": {"nodeConfiguration": {"externalConfigName": "my-node-config"}}})
    assert name("node-config") not in out.names("ConfigMap")
    vols = {v["name"]: v for v in pod_spec(out.get("DaemonSet", name("device-plugin")))["volumes"]}
    assert vols["node-config"]["configMap"]["name"] == "my-node-config"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"scheduler": {"replicas": 2, "leaderElect": False}}, "leaderElect"),
        ({"devicePlugin": {"libPath": "/opt/vgpu"}}, "gpuHookPath"),
        ({"devicePlugin": {"backend": "fake"}}, "fakeDevices"),
        ({"devicePlugin": {"nodeConfiguration": {"config": "{not json"}}}, "not valid JSON"),
        ({"devicePlugin": {"nodeConfiguration": {"config": '{"nodes": []}'}}}, "nodeconfig"),
        ({"scheduler": {"patch": {"enabled": False}}}, "needs a certificate"),
        ({"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "random"}}}, "binpack"),
        ({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "spread,fastest"}}}, "gpuSchedulerPolicy"),
        ({"resourceName": "gpu"}, "resourceName"),
        ({"scheduler": {"admissionWebhook": {"failurePolicy": "Retry"}}}, "failurePolicy"),
        ({"scheduler": {"nodeLockExpire": "five minutes"}}, "nodeLockExpire"),
        ({"devicePlugin": {"backend": "rocm"}}, "backend"),
        ({"devicePlugin": {"monitor": {"ctrPath": "/var/vgpu/containers"}}}, "gpuHookPath"),
        ({"devicePlugin": {"monitor": {"resyncInterval": "five minutes"}}}, "resyncInterval"),
    ],
)
def test_bad_values_are_refused_with_a_reason(values: dict[str, Any], message: str) -> None:
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as err:
        chartlib.render(values)
    assert message in str(err.value)


def test_values_shared_with_hami_keep_hamis_defaults() -> None:
    v = chartlib.chart().values
    assert v["schedulerName"] == "hami-scheduler"
    assert [v[k] for k in ("resourceName", "resourceMem", "resourceCores", "resourceMemPercentage", "resourcePriority")] == NVIDIA_RESOURCES
    assert v["global"]["gpuHookPath"] == "/usr/local"
    assert v["scheduler"]["defaultSchedulerPolicy"] == {"nodeSchedulerPolicy": "binpack", "gpuSchedulerPolicy": "spread"}
    assert v["scheduler"]["metricsBindAddress"] == ":9395"
    assert v["scheduler"]["nodeLockExpire"] == "5m"
    assert v["scheduler"]["leaderElect"] is True
    assert v["scheduler"]["forceOverwriteDefaultScheduler"] is True
    assert v["scheduler"]["admissionWebhook"]["failurePolicy"] == "Ignore"
    assert v["scheduler"]["admissionWebhook"]["reinvocationPolicy"] == "Never"
    dp = v["devicePlugin"]
    assert (dp["deviceSplitCount"], dp["deviceMemoryScaling"], dp["deviceCoreScaling"]) == (10, 1, 1)
    assert dp["nvidiaNodeSelector"] == {"gpu": "on"}
    assert dp["pluginPath"] == "/var/lib/kubelet/device-plugins"
    assert dp["monitor"]["resyncInterval"] == "5m"
    assert dp["service"]["httpPort"] == 31992
    assert v["legacyMetrics"] is False and v["prometheus"]["enabled"] is False
    assert v["devices"]["nvidia"] == {**v["devices"]["nvidia"], "gpuCorePolicy": "default", "libCudaLogLevel": 1}


def test_notes_tell_how_to_use_it(default: Rendered) -> None:
    notes = default.notes
    assert "kubectl label node <node> gpu=on" in notes
    for r in ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"):
        assert r in notes
    assert "hami.io/webhook=ignore" in notes


def test_scheduler_only(rendered: dict[str, Rendered]) -> None:
    out = rendered["scheduler-only"]
    assert {o["kind"] for o in out.objects} == {
        "ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
    }
    assert out.names("Deployment") == {name("scheduler")}
    assert out.names("ServiceAccount") == {name("scheduler")}


def test_amd_device_plugin_daemonset(rendered: dict[str, Rendered]) -> None:
    assert rendered["default"].maybe("DaemonSet", name("device-plugin") + "-amd") is None
    out = rendered["amd-plugin"]
    ds = out.get("DaemonSet", name("device-plugin") + "-amd")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"amd": "on"}
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["serviceAccountName"] == name("device-plugin")
    dp = container(ds, "device-plugin")
    assert dp["image"] == "ghcr.io/hami-rs/hami-device-plugin-amd:v0.1.0"
    args = args_map(dp["args"])
    assert args == {
        "--device-plugin-path": "/var/lib/kubelet/device-plugins",
        "--hook-path": "/usr/local",
        "--sysfs-root": "/sys",
        "--dev-root": "/dev",
        "--gpu-facts": "/etc/hami-rs/amd/gpu-facts.json",
        "--split-count": "10",
        "--admin-address": "0.0.0.0:9396",
    }
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in dp["volumeMounts"]}
    assert vols["device-plugins"]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert vols["sys"]["hostPath"]["path"] == "/sys" and mounts["sys"]["readOnly"] is True
    assert vols["dev"]["hostPath"]["path"] == "/dev" and mounts["dev"]["readOnly"] is True
    facts = out.get("ConfigMap", vols["gpu-facts"]["configMap"]["name"])["data"]["gpu-facts.json"]
    assert json.loads(facts)["0000:0c:00.0"]["cu_count"] == 304
    assert dp["securityContext"].get("privileged") is not True
    # Without the NVIDIA plugin the AMD one still gets its service account and RBAC.
    only = rendered["amd-only"]
    assert only.maybe("DaemonSet", name("device-plugin")) is None
    assert only.get("ServiceAccount", name("device-plugin"))


def test_amd_device_plugin_reads_the_vendor_libraries_by_default(rendered: dict[str, Rendered]) -> None:
    out = rendered["amd-only"]
    ds = out.get("DaemonSet", name("device-plugin") + "-amd")
    spec = pod_spec(ds)
    dp = container(ds, "device-plugin")
    args = args_map(dp["args"])
    assert args["--facts-source"] == "library"
    assert args["--amd-smi-lib"] == "/opt/rocm/lib/libamd_smi.so"
    assert args["--libdrm-amdgpu-lib"] == "/opt/amdgpu/lib/x86_64-linux-gnu/libdrm_amdgpu.so.1"
    assert "--gpu-facts" not in args
    assert out.maybe("ConfigMap", name("device-plugin") + "-amd-gpu-facts") is None
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in dp["volumeMounts"]}
    assert "gpu-facts" not in vols and "gpu-facts" not in mounts
    for i, path in enumerate(["/opt/rocm", "/opt/amdgpu"]):
        assert vols[f"vendor-lib-{i}"]["hostPath"] == {"path": path, "type": "Directory"}
        assert mounts[f"vendor-lib-{i}"] == {"name": f"vendor-lib-{i}", "mountPath": path, "readOnly": True}
    env = {e["name"]: e.get("value") for e in dp["env"]}
    assert env["LD_LIBRARY_PATH"] == "/opt/rocm/lib:/opt/amdgpu/lib/x86_64-linux-gnu"
    # libdrm opens the render nodes, which only a privileged container may.
    assert dp["securityContext"]["privileged"] is True
    assert "allowPrivilegeEscalation" not in dp["securityContext"]


def test_dcu_device_plugin_reads_rocm_smi_by_default(rendered: dict[str, Rendered]) -> None:
    out = rendered["dcu-only"]
    ds = out.get("DaemonSet", name("device-plugin") + "-dcu")
    spec = pod_spec(ds)
    dp = container(ds, "device-plugin")
    args = args_map(dp["args"])
    assert args["--facts-source"] == "library"
    assert args["--rocm-smi-lib"] == "/opt/hyhal/lib/librocm_smi64.so"
    assert "--dcu-facts" not in args
    assert out.maybe("ConfigMap", name("device-plugin") + "-dcu-dcu-facts") is None
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in dp["volumeMounts"]}
    assert "dcu-facts" not in vols
    assert vols["hyhal"]["hostPath"] == {"path": "/opt/hyhal", "type": "Directory"}
    assert mounts["hyhal"] == {"name": "hyhal", "mountPath": "/opt/hyhal", "readOnly": True}
    assert dp["securityContext"]["privileged"] is True


def test_dcu_device_plugin_daemonset(rendered: dict[str, Rendered]) -> None:
    assert rendered["default"].maybe("DaemonSet", name("device-plugin") + "-dcu") is None
    out = rendered["dcu-plugin"]
    ds = out.get("DaemonSet", name("device-plugin") + "-dcu")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"dcu": "on"}
    assert {"key": "hygon.com/dcunum", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["serviceAccountName"] == name("device-plugin")
    dp = container(ds, "device-plugin")
    assert dp["image"] == "ghcr.io/hami-rs/hami-device-plugin-dcu:v0.1.0"
    args = args_map(dp["args"])
    assert args == {
        "--device-plugin-path": "/var/lib/kubelet/device-plugins",
        "--sysfs-root": "/sys",
        "--dev-root": "/dev",
        "--dcu-facts": "/etc/hami-rs/dcu/dcu-facts.json",
        "--vgpu-dir": "/usr/local/vgpu",
        "--vdev-dir": "/etc/vdev",
        "--hygon-path": "/opt/dtk",
        "--hyhal-path": "/opt/hyhal",
        "--split-count": "4",
        "--admin-address": "0.0.0.0:9396",
    }
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in dp["volumeMounts"]}
    assert vols["device-plugins"]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert vols["sys"]["hostPath"]["path"] == "/sys" and mounts["sys"]["readOnly"] is True
    assert vols["dev"]["hostPath"]["path"] == "/dev" and mounts["dev"]["readOnly"] is True
    # The vdev files are written on the host, at the paths the Allocate answer names.
    assert vols["vgpu"]["hostPath"] == {"path": "/usr/local/vgpu", "type": "DirectoryOrCreate"}
    assert mounts["vgpu"]["mountPath"] == "/usr/local/vgpu" and not mounts["vgpu"].get("readOnly")
    assert vols["vdev"]["hostPath"] == {"path": "/etc/vdev", "type": "DirectoryOrCreate"}
    assert mounts["vdev"]["mountPath"] == "/etc/vdev" and not mounts["vdev"].get("readOnly")
    facts = out.get("ConfigMap", vols["dcu-facts"]["configMap"]["name"])["data"]["dcu-facts.json"]
    assert json.loads(facts)["0000:3d:00.0"]["cu_count"] == 120
    assert dp["securityContext"].get("privileged") is not True
    # Without the NVIDIA plugin the DCU one still gets its service account and RBAC.
    only = rendered["dcu-only"]
    assert only.maybe("DaemonSet", name("device-plugin")) is None
    assert only.get("ServiceAccount", name("device-plugin"))
