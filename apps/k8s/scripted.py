"""The k8s *scripted* agent: the strongest program without a model and without the ground truth
that its authors could write against the public generator (:mod:`apps.k8s.queries`), used to
measure the benchmark (a script must not top the board).

What it knows and uses: every public query starts from the one public healthy NetworkPolicy
set (:func:`apps.k8s.manifests.healthy_policies`) and its faults (paper Table 6: RI, AI, CP,
CPR, AE) only ever *edit* policies of that set; the agent's Role can write NetworkPolicies and
nothing else. So on a public query the repair never needs a diagnosis: putting the public set
back (and removing any policy that is not part of it) restores the intended connectivity,
whatever the faults were. The script therefore

1. replies ``healthy`` when the first report shows no mismatch (a healthy control);
2. otherwise sends one ``kubectl apply -f - <<EOF`` holding every policy of the public healthy
   set (:func:`apps.k8s.reference.apply_command`);
3. if mismatches remain, lists the policies (``kubectl get networkpolicies -o name``) and
   deletes, in one ``kubectl delete networkpolicy <names...>``, every one that is not in the
   public set;
4. replies ``done``.

It is stateless: the next reply is a function of the chat history alone (its position is
read from the commands already sent), like the reference agents of :mod:`apps.k8s.reference`.
It never reads the prompt's statement of the intended connectivity: on the public generator
that statement never varies.

What it cannot do: anything whose healthy state is not the public set. A namespace whose
intended connectivity differs from the public architecture (a service that also calls
another one, a call that was retired), whose healthy policies are written differently, or
that holds policies the public set does not have, is "repaired" back to the public
architecture: intended connections it does not know about are cut and retired ones reopened
(held-out variant packs, docs/writing-a-variant-pack.md). It also cannot tell a broken
namespace from a misleading report beyond the first report being clean.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from apps.k8s import manifests, prompt
from apps.k8s.reference import apply_command, last_report
from apps.k8s.replies import DONE_WORD, HEALTHY_WORD, parse_reply

#: The command that lists the namespace's policies by name.
LIST_POLICIES = "kubectl get networkpolicies -o name"
#: Prefix of the deleting command (the names follow).
DELETE_POLICIES = "kubectl delete networkpolicy"


def _fence(command: str) -> str:
    return f"```\n{command}\n```"


def restore_command() -> str:
    """The ``kubectl apply -f - <<EOF`` command that writes every policy of the public healthy
    set (:func:`apps.k8s.manifests.healthy_policies`, deny-all first)."""
    return apply_command(list(manifests.healthy_policies().values()))


def _sent(history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(command line, observation that followed)`` of every assistant reply so far
    (``done``/``healthy`` replies as their word)."""
    steps = []
    for i, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        parsed = parse_reply(message.get("content"))
        after = ""
        if i + 1 < len(history) and history[i + 1].get("role") == "user":
            after = str(history[i + 1].get("content") or "")
        steps.append((parsed.text, after))
    return steps


def policy_names(observation: str) -> list[str]:
    """Policy names in the output of ``kubectl get networkpolicies -o name`` inside an
    observation (lines ``networkpolicy.networking.k8s.io/<name>``), in output order; ``[]``
    when the observation has no output section."""
    if prompt.OUTPUT_MARKER not in observation:
        return []
    body = observation.split(prompt.OUTPUT_MARKER, 1)[1]
    body = body.split("\n\n" + prompt.REPORT_MARKER, 1)[0]
    names = []
    for line in body.splitlines():
        kind, slash, name = line.strip().partition("/")
        if slash and kind.startswith("networkpolicy") and name:
            names.append(name)
    return names


def scripted_reply(history: list[dict[str, Any]]) -> str:
    """Next reply of the scripted agent (see the module docstring).

    Args:
        history: the chat so far, ``[{"role", "content"}, ...]``; the first user message is
            the episode's first observation (task, namespace, initial report), every later
            user message the observation after the preceding assistant reply.

    Returns:
        ``healthy``, ``done`` or one fenced kubectl command. Never raises on odd histories
        (an unreadable one ends the episode with ``done``).
    """
    return restore_and_prune_reply(history, restore_command(), manifests.healthy_policies())


def restore_and_prune_reply(
    history: list[dict[str, Any]], restore: str, healthy: Collection[str]
) -> str:
    """The scripted agent's play with a given healthy policy set: ``healthy`` when the first
    report shows nothing wrong; else apply ``restore`` (one kubectl command), list the
    policies once the report is clean, delete every policy whose name is not in ``healthy``,
    then ``done``. Shared by :func:`scripted_reply` (the public set) and the adaptive agent
    (a set it learned, ``apps.k8s.adaptive``)."""
    steps = _sent(history)
    if not steps:
        return HEALTHY_WORD if not last_report(history) else _fence(restore)
    commands = [cmd for cmd, _ in steps]
    if not any(cmd.startswith("kubectl apply") for cmd in commands):
        return _fence(restore)
    if not last_report(history):
        return DONE_WORD
    listed = [obs for cmd, obs in steps if cmd == LIST_POLICIES]
    if not listed:
        return _fence(LIST_POLICIES)
    if any(cmd.startswith(DELETE_POLICIES) for cmd in commands):
        return DONE_WORD
    extra = [name for name in policy_names(listed[-1]) if name not in healthy]
    if not extra:
        return DONE_WORD
    return _fence(" ".join([DELETE_POLICIES, *extra]))
