"""Turn rendered Kubernetes manifests into Pods that ``podman kube play`` runs as they are.

Used by ``scripts/deploy_check.sh --kube``. podman (4.3, Debian 12) plays Pods and
Deployments but has no Services, StatefulSets, Secrets objects, downward API or ``$(VAR)``
expansion; this does what the cluster would have done for one replica of each workload:

* every Deployment and StatefulSet becomes one Pod named ``PREFIX<workload>``, with a fixed address
  (``--ip`` of ``podman kube play``) on the check's network, in play order (StatefulSets first);
* every Service name becomes a ``hostAliases`` entry of every Pod, pointing at the address of
  the workload its selector matches (what cluster DNS would answer);
* ``envFrom`` and ``valueFrom`` are resolved into plain values: ConfigMaps of the manifests,
  the Secret values of ``--secret NAME=ENV_FILE``, ``status.podIP`` and ``metadata.name``;
  then ``$(VAR)`` references are expanded as the kubelet does;
* claims (``persistentVolumeClaim`` and a StatefulSet's ``volumeClaimTemplates``) become podman
  named volumes ``PREFIX<claim>``, named ports in probes their numbers, and the seccomp and
  AppArmor profiles of ``securityContext`` podman's annotations; readiness and startup probes
  are dropped (podman has neither); a pod with init containers restarts on failure only
  (podman 4.3 would restart its finished init containers).

Everything else of the pod template (images, commands, privileges, capabilities, user, host
paths, init containers, liveness probes) is played as written. Standard library and PyYAML
(podman-compose's venv has it).

Usage: python3 kube_pods.py MANIFESTS OUT_DIR SUBNET_PREFIX PREFIX [--secret NAME=FILE]...
Writes OUT_DIR/<workload>.yaml and prints one line per Pod, in play order:
``workload pod-name address file volumes...``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

WORKLOADS = ("StatefulSet", "Deployment")
FIRST_HOST = 10


def _env_file(path: str) -> dict[str, str]:
    values = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value
    return values


def _expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: defined names are replaced, ``$$`` is ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, value)


def _resolve_env(
    container: dict[str, Any], sources: dict[str, dict[str, dict[str, str]]], pod: dict[str, str]
) -> None:
    env: dict[str, str] = {}
    for source in container.pop("envFrom", None) or []:
        kind = "configMapRef" if "configMapRef" in source else "secretRef"
        env.update(sources[kind][source[kind]["name"]])
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = _expand(str(item["value"]), env)
            continue
        ref = item["valueFrom"]
        if "secretKeyRef" in ref:
            env[item["name"]] = sources["secretRef"][ref["secretKeyRef"]["name"]][
                ref["secretKeyRef"]["key"]
            ]
        elif "configMapKeyRef" in ref:
            env[item["name"]] = sources["configMapRef"][ref["configMapKeyRef"]["name"]][
                ref["configMapKeyRef"]["key"]
            ]
        else:
            env[item["name"]] = pod[ref["fieldRef"]["fieldPath"]]
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]


def _numeric_ports(container: dict[str, Any]) -> None:
    named = {p["name"]: p["containerPort"] for p in container.get("ports") or [] if "name" in p}
    for probe in ("readinessProbe", "startupProbe"):
        container.pop(probe, None)
    for action in ("httpGet", "tcpSocket"):
        spec = (container.get("livenessProbe") or {}).get(action)
        if spec and isinstance(spec.get("port"), str):
            spec["port"] = named[spec["port"]]


def _profiles(container: dict[str, Any], annotations: dict[str, str]) -> None:
    context = container.get("securityContext") or {}
    if context.pop("seccompProfile", {}).get("type") == "Unconfined":
        annotations[f"container.seccomp.security.alpha.kubernetes.io/{container['name']}"] = (
            "unconfined"
        )
    if context.pop("appArmorProfile", {}).get("type") == "Unconfined":
        annotations[f"container.apparmor.security.beta.kubernetes.io/{container['name']}"] = (
            "unconfined"
        )


def main(argv: list[str]) -> int:
    manifests, out_dir, subnet, prefix, *rest = argv
    secrets: dict[str, dict[str, str]] = {}
    while rest:
        flag, spec, *rest = rest
        if flag != "--secret":
            sys.exit(f"kube_pods: unknown option {flag}")
        name, _, path = spec.partition("=")
        secrets[name] = _env_file(path)
    documents = [d for d in yaml.safe_load_all(Path(manifests).read_text()) if d]
    config_maps = {
        d["metadata"]["name"]: {k: str(v) for k, v in (d.get("data") or {}).items()}
        for d in documents
        if d["kind"] == "ConfigMap"
    }
    sources = {"configMapRef": config_maps, "secretRef": secrets}
    workloads = sorted(
        (d for d in documents if d["kind"] in WORKLOADS), key=lambda d: WORKLOADS.index(d["kind"])
    )
    addresses = {
        w["metadata"]["name"]: f"{subnet}.{FIRST_HOST + i}" for i, w in enumerate(workloads)
    }
    aliases = []
    for service in (d for d in documents if d["kind"] == "Service"):
        selector = service["spec"].get("selector") or {}
        for workload in workloads:
            labels = workload["spec"]["template"]["metadata"].get("labels") or {}
            if selector and selector.items() <= labels.items():
                aliases.append(
                    {
                        "ip": addresses[workload["metadata"]["name"]],
                        "hostnames": [service["metadata"]["name"]],
                    }
                )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for workload in workloads:
        name = workload["metadata"]["name"]
        template = copy.deepcopy(workload["spec"]["template"])
        spec = template["spec"]
        annotations = dict(template["metadata"].get("annotations") or {})
        pod = {"status.podIP": addresses[name], "metadata.name": name}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            _resolve_env(container, sources, pod)
            _numeric_ports(container)
            _profiles(container, annotations)
        volumes = []
        for volume in spec.get("volumes") or []:
            if "persistentVolumeClaim" in volume:
                claim = prefix + volume["persistentVolumeClaim"]["claimName"]
                volume["persistentVolumeClaim"]["claimName"] = claim
                volumes.append(claim)
        for claim_template in workload["spec"].get("volumeClaimTemplates") or []:
            claim = f"{prefix}{claim_template['metadata']['name']}-{name}-0"
            spec.setdefault("volumes", []).append(
                {
                    "name": claim_template["metadata"]["name"],
                    "persistentVolumeClaim": {"claimName": claim},
                }
            )
            volumes.append(claim)
        spec["hostAliases"] = aliases
        if spec.get("initContainers"):
            # podman 4.3 gives init containers the pod's restart policy: with Always it restarts
            # a finished one and then fails to remove it; OnFailure runs it once, as a kubelet.
            spec["restartPolicy"] = "OnFailure"
        pod_document = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": prefix + name,
                "labels": template["metadata"].get("labels") or {},
                "annotations": annotations,
            },
            "spec": spec,
        }
        pod_file = Path(out_dir) / f"{name}.yaml"
        pod_file.write_text(yaml.safe_dump(pod_document, sort_keys=False))
        print(name, prefix + name, addresses[name], pod_file, *volumes)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
