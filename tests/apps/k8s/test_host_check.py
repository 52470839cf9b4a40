"""The k8s host check: what a k8s worker needs, and the message when something is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.k8s.app import K8sApp
from apps.k8s.cluster.config import BINARIES, ClusterConfig
from apps.k8s.host_check import HOST_TOOLS, check_host, missing_on_host
from config.worker_host_check import host_check_queues
from evaluator.app import DependencyMissingError
from tests.conftest import require, require_root


def _stubs(directory: Path, names: list[str] | tuple[str, ...]) -> Path:
    """Executables that do nothing, one per name, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    return directory


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host with root, kubectl and every host tool on PATH (stubs) and nothing else on PATH;
    returns the directory on PATH."""
    path = _stubs(tmp_path / "path", [*HOST_TOOLS, "kubectl"])
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.delenv("NETARENA_KUBECTL", raising=False)
    monkeypatch.setattr("apps.k8s.host_check.os.geteuid", lambda: 0)
    return path


def test_a_missing_binary_directory_names_the_binaries_the_directory_and_the_make_target(
        host: Path, tmp_path: Path) -> None:
    absent = tmp_path / "no-such-cache" / "bin"
    with pytest.raises(DependencyMissingError) as raised:
        check_host(ClusterConfig(bin_dir=absent))
    assert str(raised.value) == (  # only what is missing, and how to get it
        f"cluster binaries {', '.join(BINARIES)} are neither in {absent} (NETARENA_K8S_BIN) "
        "nor on PATH; run `make k8s-binaries` to build them there"
    )


def test_binaries_present_in_the_cache_pass(host: Path, tmp_path: Path) -> None:
    cache = _stubs(tmp_path / "cache", BINARIES)
    assert missing_on_host(ClusterConfig(bin_dir=cache)) == []
    check_host(ClusterConfig(bin_dir=cache))  # does not raise


def test_one_missing_binary_is_named_alone(host: Path, tmp_path: Path) -> None:
    cache = _stubs(tmp_path / "cache", [b for b in BINARIES if b != "etcd"])
    assert missing_on_host(ClusterConfig(bin_dir=cache)) == [
        f"cluster binaries etcd are neither in {cache} (NETARENA_K8S_BIN) nor on PATH; run "
        "`make k8s-binaries` to build them there"
    ]


def test_missing_kubectl_tools_and_root_are_each_named_with_the_remedy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _stubs(tmp_path / "cache", BINARIES)
    path = _stubs(tmp_path / "path", ["ip", "nsenter", "iptables-restore"])  # no ipset, conntrack
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.delenv("NETARENA_KUBECTL", raising=False)
    monkeypatch.setattr("apps.k8s.host_check.os.geteuid", lambda: 1000)
    problems = missing_on_host(ClusterConfig(bin_dir=cache))
    assert len(problems) == 3, problems
    assert problems[0].startswith("k8s episodes need root")
    assert "kubectl is not on PATH" in problems[1]
    assert f"NETARENA_KUBECTL={cache / 'kubectl'}" in problems[1]
    assert problems[2].startswith("ipset, conntrack not on PATH; install the package(s) "
                                  "conntrack, ipset")


def test_a_k8s_worker_without_the_binaries_refuses_to_start(
        host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETARENA_K8S_BIN", str(tmp_path / "empty"))
    with pytest.raises(DependencyMissingError, match=r"the k8s app cannot run on this host: "
                       r"cluster binaries etcd, kube-apiserver, kube-controller-manager"):
        host_check_queues(["k8s"])


def test_this_host_passes() -> None:
    """The real check on this machine (the binaries under /var/cache/netarena/k8s)."""
    require_root()
    missing = ClusterConfig().missing_binaries()
    require(not missing, f"cluster binaries missing: {missing}; run make k8s-binaries")
    assert missing_on_host() == []
    K8sApp().host_check()  # does not raise
    assert host_check_queues(["k8s"]) == ["k8s"]
