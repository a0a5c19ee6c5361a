"""Shared fixtures: the value variants the chart is rendered with."""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import chartlib  # noqa: E402

FAKE_DEVICES = """\
devices:
  - uuid: GPU-fake-0
    model: NVIDIA A100-SXM4-40GB
    memory: 40960
  - uuid: GPU-fake-1
    model: NVIDIA A100-SXM4-40GB
    memory: 40960
"""

# A values file written the way HAMi's chart is configured: string booleans,
# null lists, libPath, and keys of vendors hami-rs does not handle.
HAMI_STYLE = {
    "mluResourceName": "cambricon.com/vmlu",
    "dcuResourceName": "hygon.com/dcunum",
    "scheduler": {
        "overwriteEnv": "true",
        "forceOverwriteDefaultScheduler": "false",
        "livenessProbe": False,
        "nodeLabelSelector": {"gpu": "on", "zone": "a"},
        "admissionWebhook": {
            "whitelistNamespaces": ["kube-system", "istio-system"],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchLabels": None, "matchExpressions": []},
            "objectSelector": {
                "matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]
            },
        },
    },
    "devicePlugin": {
        "libPath": "/usr/local/vgpu",
        "disablecorelimit": "true",
        "migStrategy": "none",
        "deviceListStrategy": "envvar",
        "deviceSplitCount": 4,
        "deviceMemoryScaling": 1.5,
        "nodeConfiguration": {
            "config": '{"nodeconfig": [{"name": "gpu-1", "operatingmode": "hami-core",'
            ' "devicesplitcount": 5}]}'
        },
        "monitor": {"ctrPath": "/usr/local/vgpu/containers", "resyncInterval": "10m", "extraArgs": None},
        "service": {"type": "NodePort", "httpPort": 31992, "labels": None},
    },
    "devices": {"nvidia": {"gpuCorePolicy": "force", "libCudaLogLevel": 4}},
    "legacyMetrics": "true",
}

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "webhook-disabled": {"scheduler": {"admissionWebhook": {"enabled": False}}},
    "custom-resources": {
        "schedulerName": "gpu-share",
        "resourceName": "example.com/vgpu",
        "resourceMem": "example.com/vgpu-memory",
        "resourceMemPercentage": "example.com/vgpu-memory-percentage",
        "resourceCores": "example.com/vgpu-cores",
        "resourcePriority": "example.com/vgpu-priority",
        "scheduler": {"extraManagedResources": ["hygon.com/dcunum"]},
    },
    "spread": {
        "scheduler": {
            "defaultSchedulerPolicy": {
                "nodeSchedulerPolicy": "spread",
                "gpuSchedulerPolicy": "binpack",
            }
        }
    },
    "cert-manager": {"scheduler": {"certManager": {"enabled": True}}},
    "fake-backend": {"devicePlugin": {"backend": "fake", "fakeDevices": FAKE_DEVICES}},
    "ha": {
        "scheduler": {
            "replicas": 2,
            # null, as HAMi's values.yaml leaves it (Helm drops null keys).
            "admissionWebhook": {"replicas": 3, "whitelistNamespaces": None},
            "podDisruptionBudget": {"minAvailable": 1},
        }
    },
    "no-leader-election": {"scheduler": {"leaderElect": False}},
    "amd-plugin": {
        "devicePlugin": {
            "amd": {
                "enabled": True,
                "factsSource": "file",
                "gpuFacts": {
                    "0000:0c:00.0": {
                        "uuid": "8eff74b5-0000-1000-801b-b56457add000",
                        "market_name": "AMD Instinct MI300X",
                        "vram_mib": 196288,
                        "cu_count": 304,
                    }
                },
            }
        }
    },
    "amd-only": {"devicePlugin": {"enabled": False, "amd": {"enabled": True}}},
    "dcu-plugin": {
        "devicePlugin": {
            "dcu": {
                "enabled": True,
                "factsSource": "file",
                "dcuFacts": {
                    "0000:3d:00.0": {
                        "index": 0,
                        "serial": "SN0001",
                        "model": "K100_AI",
                        "memory_mib": 65520,
                        "cu_count": 120,
                    }
                },
            }
        }
    },
    "dcu-only": {"devicePlugin": {"enabled": False, "dcu": {"enabled": True}}},
    "scheduler-only": {
        "devicePlugin": {"enabled": False},
        "scheduler": {"admissionWebhook": {"enabled": False}, "service": {"enabled": False}},
    },
    "own-certificate": {
        "scheduler": {
            "patch": {"enabled": False},
            "admissionWebhook": {"caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
        }
    },
    "hami-style-values": HAMI_STYLE,
    "monitor-options": {
        "legacyMetrics": True,
        "prometheus": {"enabled": True, "interval": "15s", "labels": {"release": "kube-prometheus"}},
        "devicePlugin": {
            "monitorimage": "registry.example.com/gpu/hami-vgpu-monitor:v1.2.3",
            "monitor": {
                "port": 9494,
                "extraArgs": ["--feedback-interval=10s"],
                "extraEnvs": {"SCAN_INTERVAL": "10s"},
            },
            "service": {"type": "NodePort", "httpPort": 31999, "annotations": {"prometheus.io/scrape": "true"}},
        },
    },
    "monitor-disabled": {"devicePlugin": {"monitor": {"enabled": False}}},
    "mirror-and-extras": {
        "global": {
            "imageRegistry": "mirror.example.com",
            "imageTag": "v9.9.9",
            "imagePullSecrets": ["regcred", {"name": "other"}],
            "labels": {"team": "gpu"},
        },
        "logging": {"format": "json", "level": "debug"},
        "devicePlugin": {
            "runtimeClassName": "nvidia",
            "createRuntimeClass": True,
            "registerInterval": "45s",
            "hostPID": True,
        },
        "scheduler": {"kubeScheduler": {"image": {"tag": "v1.33.7"}}},
    },
}


@pytest.fixture(scope="session")
def rendered() -> dict[str, chartlib.Rendered]:
    """Every variant rendered once for the newest supported Kubernetes."""
    newest = f"v1.{chartlib.KUBE_MINORS[-1]}.0"
    return {v: chartlib.render(vals, kube_version=newest) for v, vals in VARIANTS.items()}


@pytest.fixture(scope="session")
def default(rendered: dict[str, chartlib.Rendered]) -> chartlib.Rendered:
    return rendered["default"]


@pytest.fixture(scope="session")
def bin_dir() -> pathlib.Path:
    """Where the workspace's binaries were built (deploy/tests/run.sh builds them)."""
    return pathlib.Path(os.environ.get("HAMI_BIN_DIR", chartlib.REPO / "target" / "debug"))
