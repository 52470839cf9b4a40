"""Kubeconfig files and namespace-scoped credentials.

Format: https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/.
Namespace credentials are ServiceAccount tokens from the TokenRequest API
(https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-request-v1/)
bound by a RoleBinding to a Role in that namespace only (RBAC,
https://kubernetes.io/docs/reference/access-authn-authz/rbac/): the holder can do nothing in any
other namespace nor on cluster-scoped resources, and deleting the namespace revokes the token
(bound tokens are checked against their ServiceAccount).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from apps.k8s.cluster.rest import KubeRest, resource_path

_ALL_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]

DEFAULT_NAMESPACE_RULES: tuple[dict[str, Any], ...] = (
    {
        "apiGroups": [""],
        "resources": [
            "pods", "pods/status", "services", "endpoints", "configmaps", "events",
            "serviceaccounts", "persistentvolumeclaims", "limitranges", "resourcequotas",
        ],
        "verbs": _ALL_VERBS,
    },
    {
        "apiGroups": ["apps"],
        "resources": [
            "deployments", "deployments/scale", "replicasets", "replicasets/scale",
            "statefulsets", "daemonsets",
        ],
        "verbs": _ALL_VERBS,
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": _ALL_VERBS,
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        "verbs": ["create"],
    },
)
"""What a namespace user may do: workloads, services and NetworkPolicies of its namespace."""


def _kubeconfig(
    server: str, ca_cert: Path, user: str, credentials: dict[str, str], namespace: str | None
) -> dict[str, Any]:
    """One-cluster, one-user kubeconfig document (kubeconfig v1 format)."""
    context: dict[str, str] = {"cluster": "netarena", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "netarena", "cluster": {
            "server": server,
            "certificate-authority-data": _b64(ca_cert.read_bytes()),
        }}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }  # fmt: skip


def write_cert_kubeconfig(
    path: Path, server: str, ca_cert: Path, client_cert: Path, client_key: Path, user: str
) -> Path:
    """Write a kubeconfig that authenticates with a client certificate (embedded, mode 0600)."""
    credentials = {
        "client-certificate-data": _b64(client_cert.read_bytes()),
        "client-key-data": _b64(client_key.read_bytes()),
    }
    return _write(path, _kubeconfig(server, ca_cert, user, credentials, None))


def write_token_kubeconfig(
    path: Path, server: str, ca_cert: Path, token: str, user: str, namespace: str
) -> Path:
    """Write a kubeconfig that authenticates with a bearer token, default namespace set."""
    return _write(path, _kubeconfig(server, ca_cert, user, {"token": token}, namespace))


def mint_namespace_kubeconfig(
    api: client.ApiClient,
    namespace: str,
    path: Path,
    server: str,
    ca_cert: Path,
    *,
    name: str = "agent",
    rules: tuple[dict[str, Any], ...] = DEFAULT_NAMESPACE_RULES,
    expiration_s: int = 3600,
) -> Path:
    """Create (idempotently) ServiceAccount, Role and RoleBinding ``name`` in ``namespace`` and
    write a kubeconfig with a fresh token for that ServiceAccount.

    Args:
        api: an admin API client.
        namespace: must exist.
        rules: RBAC PolicyRules of the Role (dicts in API form).
        expiration_s: token lifetime in seconds (the API server enforces a 600 s minimum).

    Returns:
        ``path``, the written kubeconfig (mode 0600).

    Raises:
        kubernetes.client.rest.ApiException: on API errors other than "already exists".
    """
    rest = KubeRest(api)
    rest.create_or_keep(resource_path("serviceaccounts", namespace), {"metadata": {"name": name}})
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + namespace
    role = {"metadata": {"name": name}, "rules": [dict(r) for r in rules]}
    if not rest.create_or_keep(f"{rbac}/roles", role):
        rest.replace(f"{rbac}/roles/{name}", role)
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    if not rest.create_or_keep(f"{rbac}/rolebindings", binding):
        rest.replace(f"{rbac}/rolebindings/{name}", binding)
    request = {"spec": {"audiences": [], "expirationSeconds": max(600, expiration_s)}}
    token = rest.create(
        resource_path("serviceaccounts", namespace, name, "token"), request
    )["status"]["token"]
    user = f"system:serviceaccount:{namespace}:{name}"
    return write_token_kubeconfig(path, server, ca_cert, token, user, namespace)



def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
