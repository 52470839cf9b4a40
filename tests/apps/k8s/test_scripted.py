"""The k8s scripted agent (apps/k8s/scripted.py): written against the public generator, it puts
the public healthy policy set back. Without a cluster: its reply sequence on synthetic chats and
the repair it implies in the policy model; with the cluster (root, slow): its rate on a seeded
sample of public queries."""

from __future__ import annotations

import inspect

import pytest
import yaml

from apps.k8s import manifests, prompt, scripted
from apps.k8s.app import K8sApp
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.queries import model_matrix
from apps.k8s.replies import DONE_WORD, HEALTHY_WORD, parse_reply
from apps.k8s.scoring import Mismatch
from evaluator.testing import play_reference

APP = K8sApp()
#: A seed no other test uses; 12 queries over the three levels.
SEED, COUNT = 777_001, 12
#: The target on public queries: at least 70% correct and safe (the design restores every
#: public fault; the margin is for a rare infrastructure hiccup, not for the design).
PUBLIC_TARGET = 0.70

Report = list[Mismatch]
BROKEN: Report = [("frontend", "adservice", "TCP/9555", True, False)]


def _first(report: Report) -> dict[str, str]:
    text = (f"{prompt.render_prompt(10)}\n{prompt.NAMESPACE_LINE}k8s-ep-0\n\n"
            f"{prompt.render_report(report, 'before your first step')}")
    return {"role": "user", "content": text}


def _after(n: int, command: str, output: str,
           report: Report) -> dict[str, str]:
    text = (f"Step {n}: {command}\nExit status: 0\n{prompt.OUTPUT_MARKER}{output}\n\n"
            f"{prompt.render_report(report, f'after step {n}')}")
    return {"role": "user", "content": text}


def _said(reply: str) -> dict[str, str]:
    return {"role": "assistant", "content": reply}


def test_clean_first_report_is_declared_healthy() -> None:
    assert scripted.scripted_reply([_first([])]) == HEALTHY_WORD


def test_first_step_applies_the_whole_public_set() -> None:
    reply = scripted.scripted_reply([_first(BROKEN)])
    parsed = parse_reply(reply)
    assert parsed.argv == ("kubectl", "apply", "-f", "-") and parsed.stdin is not None
    docs = [d for d in yaml.safe_load_all(parsed.stdin) if d]
    healthy = manifests.healthy_policies()
    assert [d["metadata"]["name"] for d in docs] == list(healthy)
    assert all(d["spec"] == healthy[d["metadata"]["name"]]["spec"] for d in docs)


def test_reply_sequence_apply_list_delete_done() -> None:
    history = [_first(BROKEN)]
    apply = scripted.scripted_reply(history)
    history += [_said(apply), _after(1, "kubectl apply -f -", "configured", BROKEN)]
    listing = scripted.scripted_reply(history)
    assert parse_reply(listing).argv == ("kubectl", "get", "networkpolicies", "-o", "name")
    names = [*manifests.healthy_policies(), "allow-debug", "cart-extra"]
    output = "\n".join(f"networkpolicy.networking.k8s.io/{n}" for n in names)
    history += [_said(listing), _after(2, scripted.LIST_POLICIES, output, BROKEN)]
    delete = scripted.scripted_reply(history)
    assert parse_reply(delete).argv == (
        "kubectl", "delete", "networkpolicy", "allow-debug", "cart-extra")
    history += [_said(delete), _after(3, parse_reply(delete).text, "deleted", BROKEN)]
    assert scripted.scripted_reply(history) == DONE_WORD


def test_done_when_the_apply_cleared_the_report_or_nothing_is_extra() -> None:
    history = [_first(BROKEN)]
    apply = scripted.scripted_reply(history)
    cleared = [*history, _said(apply), _after(1, "kubectl apply -f -", "configured", [])]
    assert scripted.scripted_reply(cleared) == DONE_WORD
    history += [_said(apply), _after(1, "kubectl apply -f -", "configured", BROKEN)]
    history += [_said(f"```\n{scripted.LIST_POLICIES}\n```")]
    output = "\n".join(f"networkpolicy.networking.k8s.io/{n}" for n in manifests.healthy_policies())
    history.append(_after(2, scripted.LIST_POLICIES, output, BROKEN))
    assert scripted.scripted_reply(history) == DONE_WORD


def test_restoring_the_public_set_repairs_every_public_query_in_the_model() -> None:
    healthy = manifests.healthy_policies()
    for query in K8sApp(healthy_share=0.0).generate(60, SEED):
        restored = dict(query.ground_truth["policies"], **healthy)
        assert model_matrix(restored) == manifests.expected_edges(), query.label


def test_scripted_agent_reads_only_the_conversation() -> None:
    assert list(inspect.signature(scripted.scripted_reply).parameters) == ["history"]
    assert APP.has_scripted
    assert APP.scripted_reply([_first([])]) == HEALTHY_WORD


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_scripted_agent_solves_the_public_generator(cluster: Cluster) -> None:
    app = K8sApp(cluster_config=cluster.config)
    queries = app.generate(COUNT, SEED)
    assert {q.level for q in queries} == {1, 2, 3}
    verdicts = [play_reference(app, q, "scripted") for q in queries]
    solved = [q.label for q, v in zip(queries, verdicts, strict=True) if v.correct and v.safe]
    failed = [(q.label, v.failure) for q, v in zip(queries, verdicts, strict=True)
              if not (v.correct and v.safe)]
    assert len(solved) / len(queries) >= PUBLIC_TARGET, failed
