"""Pure parts of the cluster engine: no root, no binaries, no cluster."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apps.k8s.cluster import certs
from apps.k8s.cluster.config import ClusterConfig, MissingBinaryError
from apps.k8s.cluster.nca_runner import _parse_conn
from apps.k8s.cluster.netns import pod_link_name
from apps.k8s.cluster.node_agent import IpAllocator, pod_ports
from apps.k8s.cluster.rest import resource_path
from tests.apps.k8s.policygen import IP_BLOCKS, pod_manifests, random_policies


def test_client_certificate_carries_user_and_groups(tmp_path: Path) -> None:
    ca = certs.create_ca(tmp_path)
    pair = certs.issue(ca, tmp_path, "admin", "kubernetes-admin", ("system:masters",))
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubernetes-admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters"]
    assert cert.issuer == ca_cert.subject
    public = ca_cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca_cert)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    assert pair.key.stat().st_mode & 0o777 == 0o600


def test_serving_certificate_names_the_api_server(tmp_path: Path) -> None:
    ca = certs.create_ca(tmp_path)
    pair = certs.issue(ca, tmp_path, "apiserver", "kube-apiserver",
                       server_names=("kubernetes",), server_ips=("10.250.0.2",))
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["kubernetes"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.250.0.2"]


def test_ip_allocator_skips_used_and_does_not_reuse_at_once() -> None:
    ips = IpAllocator("10.244.0.0/29")  # hosts .1-.6; .1 is skipped
    assert ips.reserve("10.244.0.3")
    assert not ips.reserve("10.244.0.3")
    assert not ips.reserve("10.245.0.1")
    got = [ips.allocate() for _ in range(4)]
    assert got == ["10.244.0.2", "10.244.0.4", "10.244.0.5", "10.244.0.6"]
    with pytest.raises(RuntimeError):
        ips.allocate()
    ips.release("10.244.0.4")
    assert ips.allocate() == "10.244.0.4"


def test_pod_ports_and_link_names() -> None:
    pod = {"spec": {"containers": [
        {"ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]},
        {"name": "no-ports"},
    ]}}
    assert pod_ports(pod) == [("TCP", 80), ("UDP", 53)]
    name = pod_link_name("0b6f3c1e-8a53-4a8e-9d9e-1f2a3b4c5d6e")
    assert len(name) <= 15 and name.startswith("nkp")
    assert name != pod_link_name("another-uid")


def test_resource_paths() -> None:
    assert resource_path("pods", "ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert resource_path("networkpolicies", "ns") == (
        "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies")
    assert resource_path("nodes", name="n0") == "/api/v1/nodes/n0"


def test_missing_binary_is_reported(tmp_path: Path) -> None:
    config = ClusterConfig(bin_dir=tmp_path)
    with pytest.raises(MissingBinaryError):
        config.find_binary("definitely-not-a-kubernetes-binary")


def test_nca_connection_parsing() -> None:
    assert _parse_conn("All connections") == [(None, None)]
    assert _parse_conn("{protocols:TCP,UDP,dst_ports:80,90-99}") == [
        ({"TCP", "UDP"}, ["80", "90-99"])]
    assert _parse_conn("{protocols:UDP}") == [({"UDP"}, None)]


def test_policy_generator_is_seeded_and_covers_former_divergences() -> None:
    a = random_policies("w", random.Random(7))
    assert a == random_policies("w", random.Random(7))
    seen_blocks = set()
    both_directions = egress_named_without_to = 0
    for seed in range(200):
        for policy in random_policies("w", random.Random(seed)):
            spec = policy["spec"]
            both_directions += "ingress" in spec and "egress" in spec
            for rule in spec.get("egress", []):
                egress_named_without_to += "to" not in rule and any(
                    isinstance(p.get("port"), str) for p in rule.get("ports", []))
            for rule in spec.get("ingress", []) + spec.get("egress", []):
                for peer in rule.get("from", []) + rule.get("to", []):
                    if "ipBlock" in peer:
                        seen_blocks.add(peer["ipBlock"]["cidr"])
    assert seen_blocks == set(IP_BLOCKS)  # including 10.0.0.0/8 over the pod network
    assert both_directions > 20 and egress_named_without_to > 5
    numbers = {p["metadata"]["name"] + p["metadata"]["namespace"]: p["spec"]["containers"][0]
               ["ports"][0]["containerPort"] for p in pod_manifests("w", random.Random(3))}
    assert len(set(numbers.values())) == 2  # one port name, different numbers on different pods
    pods = pod_manifests("w", random.Random(1))
    assert len(pods) == 6 and {p["metadata"]["namespace"] for p in pods} == {"w-a", "w-b"}



def test_sync_and_control_plane_import_without_a_cycle() -> None:
    """``sync`` (the dataplane barrier) must not import ``control_plane`` (which imports it):
    in a fresh interpreter, importing ``sync`` leaves ``control_plane`` unloaded, and each
    module imports first on its own."""
    import subprocess
    import sys

    for first in ("sync", "control_plane", "enforcer", "compiler"):
        code = (
            f"import sys; import apps.k8s.cluster.{first}; "
            "print('apps.k8s.cluster.control_plane' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[3]).stdout.strip()
        assert out == ("True" if first == "control_plane" else "False"), (first, out)
