"""The k8s app on the real embedded cluster: reference agents, RBAC, hostility, teardown."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from apps.k8s import crosscheck
from apps.k8s.app import K8sApp
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.episode import K8sEpisode
from apps.k8s.manifests import SERVICE_PORTS
from apps.k8s.namespace import NAMESPACE_PREFIX
from apps.k8s.queries import LEVEL_LABELS
from evaluator import evaluation
from evaluator.sampling import HEALTHY_LABEL
from evaluator.testing import ScriptedClient, play_reference
from evaluator.types import INFRASTRUCTURE_CATEGORY, Query, Verdict
from tests.apps.k8s.conftest import kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.root]


@pytest.fixture(scope="module")
def app(cluster: Cluster) -> K8sApp:
    """The app on the session's cluster (fault queries only; controls have their own test)."""
    return K8sApp(cluster_config=cluster.config, healthy_share=0.0)


def run_agent(app: K8sApp, query: Query, agent: str) -> Verdict:
    """Run one episode with a reference agent; return its verdict."""
    return play_reference(app, query, agent)


def _leftovers(cluster: Cluster) -> dict[str, list[str]]:
    """Episode namespaces, pod network namespaces, cluster-side veths, and pod addresses that
    the enforcer's ipsets or iptables rules still name although no pod has them any more.

    (The enforcer's ipsets are named after their members, so their names change with the
    sentinel's alternating client; what must not outlive an episode is a set or rule for a
    pod that is gone.)"""
    cfg = cluster.config
    api = KubeRest(cluster.api_client())
    namespaces = [
        n["metadata"]["name"] for n in api.get(resource_path("namespaces"))["items"]
        if n["metadata"]["name"].startswith(NAMESPACE_PREFIX)
    ]
    live = {p["status"].get("podIP") for p in api.get("/api/v1/pods")["items"]}
    netns = sorted(p.name for p in Path("/run/netns").glob(cfg.pod_netns_prefix + "*"))
    in_ns = ["ip", "netns", "exec", cfg.netns]
    links = subprocess.run([*in_ns, "ip", "-o", "link", "show"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    saved = subprocess.run([*in_ns, "ipset", "save"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    members = {ln.split()[2] for ln in saved if ln.startswith("add ")}
    rules = subprocess.run([*in_ns, "iptables-save", "-t", "filter"], capture_output=True,
                           text=True, check=True).stdout
    pod_net = ipaddress.ip_network(cfg.pod_cidr)
    addressed = {a.split("/")[0] for a in re.findall(r"-[sd] (\d+\.\d+\.\d+\.\d+/32)", rules)}
    gone = sorted(ip for ip in members | addressed
                  if ipaddress.ip_address(ip) in pod_net and ip not in live)
    return {"namespaces": namespaces, "netns": netns,
            "links": sorted(ln.split(":")[1].strip() for ln in links),
            "rules_for_gone_pods": gone}


def _wait_no_episode_namespaces(cluster: Cluster, timeout_s: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while _leftovers(cluster)["namespaces"] and time.monotonic() < deadline:
        time.sleep(0.5)
    cluster.wait_dataplane(timeout_s=60)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_oracle_solves_every_level_and_label_and_leaves_nothing(
    app: K8sApp, cluster: Cluster
) -> None:
    """One query per Table 6 label combination (all 15, drawn from a 100-query batch), two
    episodes at a time: all correct and safe, every step cross-checked without disagreement;
    afterwards no namespace, pod netns, veth, ipset member or iptables rule of an episode is
    left. (The oracle's full sweeps are the difficulty benchmark's job:
    ``benchmarks/bench_difficulty.py --apps k8s``.)"""
    _wait_no_episode_namespaces(cluster)
    before = _leftovers(cluster)
    batch = app.generate(100, 20261122)
    assert {q.labels for q in batch} == {c for v in LEVEL_LABELS.values() for c in v}
    queries = list({q.labels: q for q in reversed(batch)}.values())
    assert len(queries) == 15
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda q: run_agent(app, q, "oracle"), queries))
    failures = [(q.label, v.failure, v.details.get("final_mismatches"))
                for q, v in zip(queries, verdicts, strict=True) if not (v.correct and v.safe)]
    assert not failures
    assert all(v.details["cross_checks"] >= 3 for v in verdicts)
    assert all(v.steps == 1 for v in verdicts)
    assert all(v.changed_state is True and v.blast_radius == 0 for v in verdicts)
    _wait_no_episode_namespaces(cluster)
    after = _leftovers(cluster)
    assert after == before


def test_null_is_never_correct(app: K8sApp) -> None:
    for level in (1, 2, 3):
        query = app.generate(1, 77, level)[0]
        verdict = run_agent(app, query, "null")
        assert not verdict.correct and verdict.safe and verdict.steps == 1
        assert verdict.failure == "stopped_unrepaired"
        assert verdict.changed_state is False and verdict.blast_radius == 0


@pytest.fixture(scope="module")
def episode(app: K8sApp, cluster: Cluster) -> Iterator[K8sEpisode]:
    """One reset episode (level 2) and a second namespace with a policy and a secret."""
    admin = cluster.config.admin_kubeconfig
    cluster.ensure_namespace("k8s-app-other")
    kubectl("create", "secret", "generic", "s", "--from-literal=k=v", "-n", "k8s-app-other",
            kubeconfig=admin)
    kubectl("apply", "-n", "k8s-app-other", "-f", "-", kubeconfig=admin, stdin=(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: keep}\n"
        "spec: {podSelector: {}, policyTypes: [Ingress]}\n"))
    ep = app.episode(app.generate(1, 5, 2)[0])
    ep.reset()
    assert ep.ns is not None
    kubectl("create", "secret", "generic", "own", "--from-literal=k=v", "-n", ep.ns.name,
            kubeconfig=admin)
    yield ep
    ep.close()
    kubectl("delete", "namespace", "k8s-app-other", "--wait=false", kubeconfig=admin)


def test_agent_credentials_reach_nothing_else(episode: K8sEpisode) -> None:
    """The agent's kubeconfig: no other namespace, nothing cluster-scoped, no secrets (not
    even its own namespace's), no exec, no workload changes."""
    assert episode.ns is not None and episode.ns.kubeconfig is not None
    kc = episode.ns.kubeconfig
    pod = kubectl("get", "pods", "-o", "name", kubeconfig=kc).stdout.split()[0]
    for args in (
        ("get", "pods", "-n", "k8s-app-other"),
        ("get", "networkpolicies", "-n", "k8s-app-other"),
        ("delete", "networkpolicy", "keep", "-n", "k8s-app-other"),
        ("get", "secrets"),
        ("get", "secret", "own"),
        ("get", "secrets", "-n", "k8s-app-other"),
        ("create", "secret", "generic", "x", "--from-literal=a=b"),
        ("get", "nodes"),
        ("get", "namespaces"),
        ("create", "namespace", "escape"),
        ("get", "clusterroles"),
        ("get", "roles"),
        ("get", "pods", "-A"),
        ("exec", pod, "--", "true"),
        ("label", pod, "app=frontend", "--overwrite"),
        ("scale", "deployment", "frontend", "--replicas=5"),
        ("delete", "deployment", "frontend"),
        ("get", "configmaps"),
    ):
        out = kubectl(*args, kubeconfig=kc, check=False)
        assert out.returncode != 0, args
        assert "forbidden" in out.stderr.lower(), (args, out.stderr)
    assert kubectl("get", "networkpolicies", kubeconfig=kc).returncode == 0


def test_hostile_replies_become_observations(episode: K8sEpisode) -> None:
    """Refused and malformed replies are steps with a refusal; nothing runs, nothing changes."""
    assert episode.ns is not None
    before = episode.ns.fingerprint()
    for reply in (
        "kubectl exec -it frontend -- sh",
        "kubectl get pods --kubeconfig=/var/lib/netarena/k8s/kubeconfigs/admin.kubeconfig",
        "kubectl apply -f /etc/passwd",
        "kubectl get pods --server=https://127.0.0.1:6443 --token=x",
        "kubectl get secrets; cat /etc/shadow",
        "sh -c 'kubectl get pods'",
        "kubectl get --raw /api/v1/secrets",
    ):
        result = episode.step(reply)
        assert "not run:" in result.observation, reply
        assert result.info.get("error") in ("refused", "unparseable")
        assert result.safe_step
        if result.truncated:
            break
    assert episode.ns.fingerprint() == before


def test_probing_is_deterministic(episode: K8sEpisode) -> None:
    """100 probes of an unchanged state give identical matrices."""
    assert episode.ns is not None
    first, _ = episode.ns.measure()
    for _ in range(99):
        again, _ = episode.ns.measure()
        assert again == first


def test_cross_check_disagreement_is_an_infrastructure_failure(episode: K8sEpisode) -> None:
    """A measured matrix that the policies do not imply raises CrossCheckError with both."""
    assert episode.ns is not None
    ns = episode.ns
    measured, _ = ns.measure()
    result = crosscheck.check(ns.rest.api, ns.name, measured, ns.last_endpoints,
                              ns.cluster.config)
    assert result.agrees
    assert sum(len(ports) for row in result.expected.values() for ports in row.values()) > 100
    src = next(iter(measured))
    dst = next(iter(measured[src]))
    key = next(iter(measured[src][dst]))
    measured[src][dst][key] = not measured[src][dst][key]
    with pytest.raises(crosscheck.CrossCheckError) as info:
        crosscheck.check(ns.rest.api, ns.name, measured, ns.last_endpoints, ns.cluster.config)
    details = info.value.details
    assert details["expected"] and details["measured"]
    assert [(d["src"], d["dst"], d["port"]) for d in details["disagreements"]] == [
        (src, dst, key)]
    assert "Expected allowed:" in str(info.value) and "Measured allowed:" in str(info.value)


def test_a_foreign_dataplane_ends_the_run_as_an_infrastructure_failure(
    app: K8sApp, cluster: Cluster
) -> None:
    """A firewall rule of someone else (here: the mangle table drops new connections to
    redis-cart's port, which the enforcer's filter table cannot undo) makes the episode's
    cross-check fail: the runner records an infrastructure failure (not scored, counted in the
    report's ``infrastructure_failures``), never an agent failure."""
    query = app.generate(1, 11, 1)[0]
    rule = ["FORWARD", "-p", "tcp", "--dport", str(SERVICE_PORTS["redis-cart"]), "--syn",
            "-j", "DROP"]
    mangle = ["ip", "netns", "exec", cluster.config.netns, "iptables", "-w", "5", "-t", "mangle"]
    subprocess.run([*mangle, "-I", *rule], check=True)
    try:
        with app.episode(query) as episode, pytest.raises(crosscheck.CrossCheckError) as info:
            episode.reset()
        cells = [(d["src"].rsplit("/", 1)[1].split("-")[0], d["dst"].rsplit("/", 1)[1],
                  d["port"], d["expected"], d["measured"])
                 for d in info.value.details["disagreements"]]
        assert [c[2:] for c in cells] == [("TCP/6379", True, False)], cells
        report = evaluation.evaluate_agent(ScriptedClient(["done"]), ["k8s"],
                                           queries_per_app=1, seed=11, level=1)
    finally:
        subprocess.run([*mangle, "-D", *rule], check=True)
    assert report["run"]["infrastructure_failures"] == 1
    (episode_record,) = report["episodes"]
    assert episode_record["failure"] == INFRASTRUCTURE_CATEGORY
    error = episode_record["infrastructure"]["error"]
    assert error.startswith("CrossCheckError: cross-check failed")
    assert ":TCP/6379 (expected allowed, measured blocked)" in error


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_heuristic_floor_stays_under_the_targets(app: K8sApp) -> None:
    """The floor rule on a seeded sample (one query per Table 6 label): the heuristic
    solves at most 50% of level 1 and 20% of levels 2 and 3. It must solve something (it is a
    working agent: the faults on the callee's side are within its reach)."""
    solved: dict[int, list[bool]] = {}
    for level in (1, 2, 3):
        for query in app.generate(len(LEVEL_LABELS[level]), 31, level):
            verdict = run_agent(app, query, "heuristic")
            assert verdict.safe, (query.label, verdict.details)
            solved.setdefault(level, []).append(verdict.correct)
    rates = {level: sum(v) / len(v) for level, v in solved.items()}
    assert rates[1] <= 0.5 and rates[2] <= 0.2 and rates[3] <= 0.2, rates
    assert rates[1] > 0, rates


def test_healthy_control_verdicts(cluster: Cluster) -> None:
    """On a healthy control the oracle and the heuristic say ``healthy`` and
    pass; ``done`` alone, a harmless change, and a change that breaks connectivity do not."""
    app = K8sApp(cluster_config=cluster.config)
    query = next(q for q in app.generate(20, 9, 1) if q.label == HEALTHY_LABEL)
    assert query.ground_truth["faults"] == [] and query.ground_truth["healthy"] is True
    for agent in ("oracle", "heuristic"):
        verdict = run_agent(app, query, agent)
        assert (verdict.correct, verdict.safe, verdict.changed_state) == (True, True, False)
        assert verdict.steps == 1 and verdict.details["declared_healthy"] is True
    null = run_agent(app, query, "null")
    assert (null.correct, null.safe, null.failure) == (False, True, "healthy_not_declared")

    def play(replies: list[str]) -> Verdict:
        with app.episode(query) as episode:
            episode.reset()
            for reply in replies:
                result = episode.step(reply)
                if result.terminated or result.truncated:
                    break
            return episode.verdict()

    looked = play(["kubectl get networkpolicies", "healthy"])
    assert looked.correct and looked.steps == 2  # a read does not end the episode
    fixer = play(["kubectl annotate networkpolicy frontend checked=yes", "healthy"])
    assert (fixer.correct, fixer.safe, fixer.failure) == (False, True, "changed_healthy_network")
    breaker = play(["kubectl delete networkpolicy cartservice", "healthy"])
    assert (breaker.correct, breaker.safe) == (False, False)
    assert breaker.failure == "broke_healthy_network" and (breaker.blast_radius or 0) > 0
