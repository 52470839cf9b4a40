"""Plain-JSON access to the API server through the official client's ``ApiClient``.

The generated typed methods want model objects; for the generic, dict-shaped work of the
agent, the sync sentinel and the tests (``{"metadata": ..., "spec": ...}`` exactly as in YAML)
this thin layer reuses the client's TLS, authentication and retries and speaks JSON.
Paths follow the API conventions (https://kubernetes.io/docs/reference/using-api/api-concepts/).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

Obj = dict[str, Any]

_GROUP_PATHS = {
    "pods": "/api/v1", "services": "/api/v1", "namespaces": "/api/v1", "nodes": "/api/v1",
    "serviceaccounts": "/api/v1", "endpoints": "/api/v1", "configmaps": "/api/v1",
    "deployments": "/apis/apps/v1", "replicasets": "/apis/apps/v1",
    "networkpolicies": "/apis/networking.k8s.io/v1",
    "leases": "/apis/coordination.k8s.io/v1",
}


def resource_path(resource: str, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """URL path of a collection or object, e.g. ``/api/v1/namespaces/ns/pods/p/status``.

    Raises:
        KeyError: for a resource not in the built-in table (pass a full path instead).
    """
    path = _GROUP_PATHS[resource]
    if namespace is not None:
        path += f"/namespaces/{namespace}"
    path += f"/{resource}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


class KubeRest:
    """JSON requests with the credentials of ``api``."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = JSON,
        timeout_s: float = 30.0,
    ) -> Obj:
        """Send one request; return the decoded JSON response (``{}`` if empty).

        Raises:
            kubernetes.client.rest.ApiException: for any non-2xx status (``.status`` holds it).
        """
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        _method, url, header_params, ser_body, _post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(
            method, url, header_params=header_params, body=ser_body, _request_timeout=timeout_s
        )
        resp.read()
        if not 200 <= int(resp.status) < 300:
            raise ApiException(http_resp=resp)
        return json.loads(resp.data) if resp.data else {}

    def get(self, path: str, **query: str) -> Obj:
        """GET ``path`` (query parameters as keyword arguments, e.g. ``labelSelector``)."""
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: Obj) -> Obj:
        """POST ``body`` to the collection at ``path``."""
        return self.request("POST", path, body)

    def replace(self, path: str, body: Obj) -> Obj:
        """PUT ``body`` at ``path``."""
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> Obj:
        """PATCH ``path`` (merge patch by default)."""
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: Obj | None = None, **query: str) -> Obj:
        """DELETE ``path``."""
        return self.request("DELETE", path, body, query=query or None)

    def create_or_keep(self, path: str, body: Obj) -> bool:
        """Create unless it exists; True if created.

        Raises:
            ApiException: for errors other than 409 Conflict.
        """
        try:
            self.create(path, body)
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
