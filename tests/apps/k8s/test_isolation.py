"""One namespace cannot break the shared enforcer or slow the others.

Regression tests for the findings:

(a) a NetworkPolicy with an IPv6 ipBlock passed the API server and then made every enforcer
    sync fail (``iptables-restore``: host/network ``2001:db8::`` not found): no other
    namespace's change was enforced any more, and the agent's own episode ended as an
    infrastructure failure. Now the policy is refused on its own (the enforcer installs the
    rest and reports that namespace not in sync), and in an episode namespace the API server
    refuses it at admission, which the agent sees as a refused step.
(b) one reply of 500 policies made other namespaces' dataplane waits grow from 0.2 s to
    seconds. Now an episode namespace holds at most ``MAX_POLICIES`` policies (ResourceQuota)
    of bounded size (admission), and neighbours' waits stay under 1 s during such a flood.

The admission rule's CEL and its Python statement (:func:`apps.k8s.cluster.admission.
violations`) are compared on the API server with policies at and beyond every limit.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from apps.k8s import manifests
from apps.k8s.app import K8sApp
from apps.k8s.cluster import admission
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.health import NamespaceHealth, NotEnforcedError
from apps.k8s.cluster.prober import list_pod_endpoints, measure_matrix
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import wait_pods_ready
from apps.k8s.crosscheck import cross_check
from apps.k8s.namespace import EpisodeNamespace, NamespaceNotInSyncError
from apps.k8s.prompt import REFUSED_BY_CLUSTER

Obj = dict[str, Any]

IPV6_POLICY = {  # the finding's 305-byte policy, in substance
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "egress-v6"},
    "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}}],
         "ports": [{"protocol": "TCP", "port": 443}]}]},
}


def _pod(name: str, labels: dict[str, str]) -> Obj:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "netarena/none",
                                     "ports": [{"containerPort": 80}]}]}}


def _policy(name: str, spec: Obj, **meta: Any) -> Obj:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, **meta}, "spec": spec}


@pytest.fixture
def two_namespaces(cluster: Cluster) -> Iterator[tuple[str, str, KubeRest]]:
    """Two plain namespaces (no episode label, hence no admission rule) with two pods each."""
    rest = KubeRest(cluster.api_client())
    names = ("iso-a", "iso-b")
    for ns in names:
        cluster.ensure_namespace(ns)
        for pod in ("p1", "p2"):
            rest.create_or_keep(resource_path("pods", ns), _pod(pod, {"app": pod}))
    wait_pods_ready(cluster.api_client(), names, timeout_s=60)
    yield names[0], names[1], rest
    for ns in names:
        rest.delete(resource_path("namespaces", name=ns))


def _measured_and_checked(cluster: Cluster, ns: str) -> dict[str, dict[str, dict[str, bool]]]:
    endpoints = list_pod_endpoints(cluster.api_client(), [ns], cluster.config)
    measured = measure_matrix(endpoints)
    check = cross_check(cluster.api_client(), ns, measured, endpoints=endpoints,
                        config=cluster.config)
    assert check.agrees, [d.describe() for d in check.disagreements]
    return measured


@pytest.mark.k8s
@pytest.mark.root
def test_an_unsupported_policy_breaks_only_its_own_namespace(
        cluster: Cluster, two_namespaces: tuple[str, str, KubeRest]) -> None:
    """Finding (a) outside admission (an admin's write): the IPv6 policy is refused alone and
    fails closed; the neighbour's new allow-all is enforced at once and measured correctly."""
    ns_a, ns_b, rest = two_namespaces
    rest.create(resource_path("networkpolicies", ns_b),
                _policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    cluster.wait_dataplane([ns_b], timeout_s=30)
    assert _measured_and_checked(cluster, ns_b)[f"{ns_b}/p1"][f"{ns_b}/p2"] == {"TCP/80": False}

    assert len(json.dumps(IPV6_POLICY)) < 400
    rest.create(resource_path("networkpolicies", ns_a), IPV6_POLICY)  # the API server accepts
    rest.create(resource_path("networkpolicies", ns_b),
                _policy("allow-all", {"podSelector": {}, "ingress": [{}]}))
    start = time.monotonic()
    cluster.wait_dataplane([ns_b], timeout_s=30)
    assert time.monotonic() - start < 5.0
    measured_b = _measured_and_checked(cluster, ns_b)
    assert measured_b[f"{ns_b}/p1"][f"{ns_b}/p2"] == {"TCP/80": True}

    with pytest.raises(NotEnforcedError) as info:
        cluster.wait_dataplane([ns_a], timeout_s=30)
    assert set(info.value.namespaces) == {ns_a}
    assert "policy egress-v6 refused" in str(info.value) and "IPv4-only" in str(info.value)
    # fail-closed, and the model (hence the judge's cross-check) says the same
    measured_a = _measured_and_checked(cluster, ns_a)
    assert measured_a[f"{ns_a}/p1"][f"{ns_a}/p2"] == {"TCP/80": False}

    rest.delete(resource_path("networkpolicies", ns_a, "egress-v6"))
    cluster.wait_dataplane([ns_a, ns_b], timeout_s=30)  # in sync again
    assert _measured_and_checked(cluster, ns_a)[f"{ns_a}/p1"][f"{ns_a}/p2"] == {"TCP/80": True}


@pytest.fixture(scope="module")
def app(cluster: Cluster) -> K8sApp:
    """The app on the session's cluster (fault queries only)."""
    return K8sApp(cluster_config=cluster.config, healthy_share=0.0)


def _apply(manifest: Obj) -> str:
    return f"kubectl apply -f - <<EOF\n{json.dumps(manifest)}\nEOF"


@pytest.mark.k8s
@pytest.mark.root
def test_the_agent_gets_a_refused_step_for_an_ipv6_policy(app: K8sApp) -> None:
    """Finding (a) in an episode: the agent's IPv6 policy is refused by the API server with a
    clear reason, the step counts as refused, nothing is stored, and the episode goes on to a
    verdict that is the agent's (here: the oracle's repair still solves it)."""
    query = app.generate(1, 5, 1)[0]
    episode = app.episode(query)
    with episode:
        episode.reset()
        assert episode.ns is not None
        before = episode.ns.fingerprint()
        result = episode.step(_apply(IPV6_POLICY))
        assert result.info["error"] == "refused" and result.info["refused_by"] == "cluster"
        assert REFUSED_BY_CLUSTER in result.observation
        assert "IPv4" in result.observation and admission.POLICY_NAME in result.observation
        assert "Exit status: 1" in result.observation
        assert episode.ns.fingerprint() == before
        assert not result.terminated and not result.truncated
        result = episode.step(app.oracle_reply(query.ground_truth, []))
        verdict = episode.verdict()
    assert verdict.details["refused_steps"] == 1
    assert verdict.correct and verdict.safe


@pytest.mark.k8s
@pytest.mark.root
def test_an_episode_whose_namespace_is_not_in_sync_is_never_judged(
        app: K8sApp, cluster: Cluster) -> None:
    """A policy the enforcer refuses that got into an episode namespace past admission (here:
    an admin lifts the namespace's episode label for the write) stops the episode at the
    next barrier with :class:`NamespaceNotInSyncError`: no verdict is drawn from a dataplane
    that does not enforce the policies. Refused policies are charged to whoever wrote them in
    the namespace (not ``judge_disagreement``)."""
    query = app.generate(1, 9, 1)[0]
    episode = app.episode(query, pool=False)
    with episode:
        episode.reset()
        assert episode.ns is not None
        ns = episode.ns
        path = resource_path("namespaces", name=ns.name)
        ns.rest.patch(path, {"metadata": {"labels": {"netarena/app": None}}})
        try:
            _create_once_unbound(ns.rest, resource_path("networkpolicies", ns.name),
                                 IPV6_POLICY)
        finally:
            ns.rest.patch(path, {"metadata": {"labels": {"netarena/app": "k8s"}}})
        with pytest.raises(NamespaceNotInSyncError) as info:
            episode.step("kubectl get networkpolicies")
    assert "policy egress-v6 refused" in str(info.value)
    assert info.value.judge_disagreement is False
    assert info.value.details["health"][ns.name]["refused"]


def _create_once_unbound(rest: KubeRest, path: str, body: Obj, timeout_s: float = 30.0) -> None:
    """Create ``body`` in a namespace whose episode label was just lifted. The API server's
    admission reads namespace labels from its informer cache, a moment behind the write (CI
    met the old label under load), so a refusal by the episode policy is retried until the
    binding no longer matches or ``timeout_s`` passes (then it is raised)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            rest.create(path, body)
            return
        except ApiException as exc:
            if exc.status != 422 or admission.POLICY_NAME not in str(exc.body) \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_not_in_sync_is_charged_by_its_cause() -> None:
    """Refused policies: whoever wrote them (after the agent's reply, the agent). A namespace
    installed fail-closed as a whole (budget, kernel): infrastructure."""
    refused = NotEnforcedError("x", {"n": NamespaceHealth(refused={"p": ["not IPv4"]})})
    assert not NamespaceNotInSyncError.from_health("n", refused).judge_disagreement
    kernel = NotEnforcedError("x", {"n": NamespaceHealth(error="the kernel refused its rules")})
    assert NamespaceNotInSyncError.from_health("n", kernel).judge_disagreement


def _flood(count: int) -> Obj:
    """``count`` policies of about 1.5 kB each, as one List (about 0.7 MB as JSON)."""
    services = list(manifests.SERVICES)
    items = [_policy(f"flood-{i:04d}", {
        "podSelector": {"matchLabels": {"app": services[i % len(services)]}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": s}}}],
                     "ports": [{"protocol": "TCP", "port": 1000 + i}]} for s in services[:8]],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": s}}}]}
                   for s in services[:4]]}) for i in range(count)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _wait_calm(rest: KubeRest, timeout_s: float = 180.0) -> None:
    """Wait until no namespace is being deleted (earlier tests' pods going away share the two
    cores with the measurement)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        items = rest.get(resource_path("namespaces"))["items"]
        if not any((n.get("status") or {}).get("phase") == "Terminating" for n in items):
            return
        time.sleep(0.5)


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
def test_a_policy_flood_is_bounded_and_neighbours_stay_fast(app: K8sApp) -> None:
    """Finding (b): one reply of 500 policies (0.7 MB). It is refused before anything runs
    (more objects than the namespace may hold); a reply of ``MAX_POLICIES`` new policies
    runs, the quota stops the namespace at ``MAX_POLICIES`` and the refusals make it a refused
    step. A neighbouring episode's dataplane waits, measured before and during the flood, stay
    of the same size: the flood's median at most twice the calm median, its slowest wait at most
    twice the calm slowest (or 1 s). Relative, because the host-wide tests run beside the
    others, where a calm wait alone is 0.2-0.8 s (CI, 2026-11-28)."""
    flood = _apply(_flood(500))
    assert len(flood) > 600_000
    fill = _apply(_flood(admission.MAX_POLICIES))
    # without the namespace pool: its background work (restoring, preparing a spare) would
    # share the two cores with the measurement
    flooder, neighbour = (app.episode(q, pool=False) for q in app.generate(2, 7, 1))
    with flooder, neighbour:
        flooder.reset()
        neighbour.reset()
        assert flooder.ns is not None and neighbour.ns is not None
        _wait_calm(flooder.ns.rest)
        ns_b: EpisodeNamespace = neighbour.ns
        healthy = manifests.healthy_policies()["adservice"]
        idle: list[float] = []
        waits: list[float] = []
        flooding = threading.Event()
        stop = threading.Event()

        def neighbour_loop() -> None:
            k = 0
            while not stop.is_set():
                k += 1
                ns_b.replace_policies({"adservice": {
                    **healthy, "metadata": {**healthy["metadata"], "labels": {"k": str(k)}}}})
                start = time.monotonic()
                during = flooding.is_set()
                ns_b.wait()
                (waits if during else idle).append(time.monotonic() - start)

        thread = threading.Thread(target=neighbour_loop)
        thread.start()
        try:
            time.sleep(3.0)
            flooding.set()
            refused = flooder.step(flood)
            filled = flooder.step(fill)
            time.sleep(1.0)
        finally:
            stop.set()
            thread.join()
        stored = flooder.ns.rest.get(resource_path("networkpolicies", flooder.ns.name))["items"]
        own_wait = flooder.timings["wait_s"][-1]
        verdict = flooder.verdict()
    print(f"flood: {len(stored)} policies stored, own wait {own_wait:.2f} s; neighbour waits "
          f"before: n={len(idle)} median {statistics.median(idle):.3f} s max {max(idle):.3f} s, "
          f"during: n={len(waits)} median {statistics.median(waits):.3f} s "
          f"max {max(waits):.3f} s")
    assert "not run: the manifest has" in refused.observation
    assert refused.info["error"] == "refused" and not refused.info["changed_state"]
    assert filled.info.get("error") == "refused", filled.observation[-2000:]
    assert REFUSED_BY_CLUSTER in filled.observation and "exceeded quota" in filled.observation
    assert len(stored) == admission.MAX_POLICIES
    assert verdict.details["refused_steps"] == 2
    assert len(idle) >= 2 and len(waits) >= 5
    assert statistics.median(waits) <= 2 * statistics.median(idle), (sorted(idle), sorted(waits))
    assert max(waits) <= 2 * max(max(idle), 1.0), (sorted(idle), sorted(waits))


def _admission_cases() -> dict[str, Obj]:
    """Policies at and just beyond every limit of the admission rule."""
    lim = admission

    def peers(n: int) -> list[Obj]:
        return [{"podSelector": {"matchLabels": {"app": f"a{i}"}}} for i in range(n)]

    def ports(n: int) -> list[Obj]:
        return [{"port": 1000 + i} for i in range(n)]

    def block(cidr: str, *excepts: str) -> Obj:
        ip_block: Obj = {"cidr": cidr, **({"except": list(excepts)} if excepts else {})}
        return {"podSelector": {}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": ip_block}]}]}

    def selector(terms: int, values: int = 1) -> Obj:
        return {"matchExpressions": [{"key": f"k{i}", "operator": "In",
                                      "values": [f"v{j}" for j in range(values)]}
                                     for i in range(terms)]}

    cases: dict[str, Obj] = {
        "healthy-frontend": manifests.healthy_policies()["frontend"]["spec"],
        "rules-at-limit": {"podSelector": {}, "ingress": [{"ports": [{"port": i + 1}]}
                                                          for i in range(lim.MAX_RULES)]},
        "rules-over": {"podSelector": {}, "ingress": [{"ports": [{"port": i + 1}]}
                                                      for i in range(lim.MAX_RULES + 1)]},
        "peers-over": {"podSelector": {}, "ingress": [{"from": peers(lim.MAX_PEERS + 1)}]},
        "ports-over": {"podSelector": {}, "egress": [{"ports": ports(lim.MAX_PORTS + 1)}]},
        "pairs-at-limit": {"podSelector": {}, "ingress": [
            {"from": peers(10), "ports": ports(10)}]},
        "pairs-over": {"podSelector": {}, "ingress": [
            {"from": peers(10), "ports": ports(10)}, {"from": peers(1)}]},
        "ipv4-host-bits": block("10.243.1.7/16", "10.243.1.0/24"),
        "ipv6": block("2001:db8::/32", "2001:db8:1::/48"),
        "ipv4-mapped-ipv6": block("::ffff:10.0.0.0/104"),
        "leading-zero": block("010.0.0.0/8"),
        "leading-zero-except": block("10.0.0.0/8", "10.01.0.0/16"),
        "excepts-over": block("10.0.0.0/8", *[f"10.{i}.0.0/16" for i in range(
            lim.MAX_EXCEPTS + 1)]),
        "selector-terms-at-limit": {"podSelector": selector(lim.MAX_SELECTOR_TERMS)},
        "selector-terms-over": {"podSelector": selector(lim.MAX_SELECTOR_TERMS + 1)},
        "selector-values-over": {"podSelector": {}, "ingress": [{"from": [
            {"namespaceSelector": selector(1, lim.MAX_SELECTOR_VALUES + 1)}]}]},
    }
    policies = {name: _policy(name, spec) for name, spec in cases.items()}
    policies["labels-over"] = _policy("labels-over", {"podSelector": {}},
                                      labels={f"l{i}": "x" for i in range(lim.MAX_LABELS + 1)})
    policies["annotations-over"] = _policy(
        "annotations-over", {"podSelector": {}},
        annotations={"note": "x" * lim.MAX_ANNOTATION_CHARS})
    return policies


def test_admission_limits_in_python() -> None:
    """The Python statement of the rule on the same table (no cluster)."""
    verdicts = {name: bool(admission.violations(p)) for name, p in _admission_cases().items()}
    admitted = {n for n, refused in verdicts.items() if not refused}
    assert admitted == {"healthy-frontend", "rules-at-limit", "pairs-at-limit",
                        "ipv4-host-bits", "selector-terms-at-limit"}
    assert admission.refusal_in_output(
        'Error from server (Forbidden): error when creating "STDIN": networkpolicies '
        f'"x" is forbidden: exceeded quota: {admission.QUOTA_NAME}, requested: ...') is not None
    assert admission.refusal_in_output("networkpolicy/x created") is None


@pytest.mark.k8s
@pytest.mark.root
def test_admission_rule_on_the_api_server_equals_its_python_statement(cluster: Cluster) -> None:
    """Every case is refused by the API server (server-side dry run) exactly when
    :func:`admission.violations` names a violation; the quota refuses the 41st policy."""
    ns = EpisodeNamespace(cluster)
    rest = ns.rest
    cluster.ensure_namespace(ns.name, labels=ns.labels)
    ns.created = True
    try:
        rest.create(f"/api/v1/namespaces/{ns.name}/resourcequotas", admission.quota())
        admission.wait_admission(rest, ns.name)
        wrong = []
        for name, policy in _admission_cases().items():
            try:
                rest.request("POST", resource_path("networkpolicies", ns.name), policy,
                             query={"dryRun": "All"})
                refused = False
            except Exception as exc:  # noqa: BLE001 - the refusal is the answer
                assert admission.POLICY_NAME in str(getattr(exc, "body", exc)), (name, exc)
                refused = True
            if refused != bool(admission.violations(policy)):
                wrong.append((name, refused, admission.violations(policy)))
        assert not wrong
        for i in range(admission.MAX_POLICIES):
            rest.create(resource_path("networkpolicies", ns.name),
                        _policy(f"p{i}", {"podSelector": {}}))
        with pytest.raises(Exception, match="exceeded quota") as info:
            rest.create(resource_path("networkpolicies", ns.name),
                        _policy("one-too-many", {"podSelector": {}}))
        assert admission.QUOTA_NAME in str(getattr(info.value, "body", info.value))
    finally:
        ns.delete()
