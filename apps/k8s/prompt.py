"""Task text and observation format of the ``k8s`` app (all wording our own).

The first observation is the task (:data:`PROMPT_TEMPLATE`, the same for every query: the
faults are hidden) followed by the episode's namespace and the initial mismatch report; each
later observation carries the command's output and the new report. Reference agents find
their way through observations with the markers defined here.
"""

from __future__ import annotations

from collections.abc import Iterable

from apps.k8s.manifests import CALLS, SERVICE_PORTS, SERVICES

#: Text in every k8s task prompt (multi-app reference servers route on it).
PROMPT_MARKER = "kubectl"
#: Marker lines of observations.
NAMESPACE_LINE = "Namespace of this episode: "
REPORT_MARKER = "Connectivity report"
OUTPUT_MARKER = "Output:\n"
NO_MISMATCH = "No mismatches: the measured connectivity equals the intended one."
MISMATCH_LINE = "{src} -> {dst}:{port} (expected {expected}, measured {measured})"
REFUSED_BY_CLUSTER = "Refused by the cluster (limits of this namespace): "
"""Observation line of a step whose write the episode namespace's admission rule or quota
refused (:mod:`apps.k8s.cluster.admission`); such a step counts as refused."""


def _architecture() -> str:
    lines = []
    for caller in SERVICES:
        if caller in CALLS:
            targets = ", ".join(f"{d} (port {SERVICE_PORTS[d]}/TCP)" for d in CALLS[caller])
            lines.append(f"- {caller} calls {targets}.")
    lines.append(
        "- No other connection between these services is intended: every pod-to-pod "
        "connection not listed above must be blocked."
    )
    return "\n".join(lines)


PROMPT_TEMPLATE = f"""\
You are the network engineer on call for Online Boutique, an online shop made of twelve \
microservices running in one Kubernetes namespace. Each service runs as one Deployment whose \
pods carry the label app=<service name>; NetworkPolicies decide which pods may connect to \
which. The shop's team reports that someone changed the policies and that the measured \
connectivity may now differ from the intended one. Find the misconfigured policies and fix \
them with kubectl so that the measured connectivity equals the intended connectivity \
exactly. The report may be wrong: if nothing is misconfigured, change nothing and say so.

Intended connectivity (ports are the pods' container ports):
{_architecture()}

How connectivity is measured: after every step the evaluator opens a TCP connection from \
every pod to every other pod's container port, using pod IP addresses (this cluster has no \
DNS and no Service routing, so Service names and ClusterIPs are not used). The report lists \
every mismatch as `source -> destination:port/protocol (expected allowed|blocked, measured \
allowed|blocked)`.

How to work:
- Each reply is exactly one kubectl command, written between one pair of triple backticks. \
It runs as the real kubectl binary without a shell: no pipes, ;, &&, redirections or $(...).
- To create or replace objects from a manifest, use a here-document:
  kubectl apply -f - <<EOF
  ...manifest...
  EOF
  -f accepts only - (standard input). kubectl patch (merge, json or strategic) works too.
- Your credentials reach only this episode's namespace (it is the default namespace; -n is \
not needed). exec, logs, port-forward, proxy, cp, edit and credential flags are refused.
- Look before you change things, and do not break connections that work now.
- Reply `done` when you are finished; if you found nothing to fix, reply `healthy` instead. \
The episode also ends by itself when one of your steps clears a report that had mismatches, \
or after {{max_steps}} steps.
"""


def render_prompt(max_steps: int) -> str:
    """The task text of every k8s query (``max_steps``: the episode's step budget)."""
    return PROMPT_TEMPLATE.format(max_steps=max_steps)


def _word(value: bool | None) -> str:
    if value is None:
        return "inconsistent (some pods allowed, some blocked, or no running pod)"
    return "allowed" if value else "blocked"


def render_report(
    mismatches: Iterable[tuple[str, str, str, bool, bool | None]], title: str
) -> str:
    """The mismatch report: ``title`` then one line per mismatch, or :data:`NO_MISMATCH`.

    Args:
        mismatches: ``(src, dst, "TCP/port", expected, measured)`` tuples.
    """
    lines = []
    for src, dst, port_key, expected, measured in sorted(mismatches):
        proto, _, port = port_key.partition("/")
        lines.append(MISMATCH_LINE.format(
            src=src, dst=dst, port=f"{port}/{proto}", expected=_word(expected),
            measured=_word(measured),
        ))
    body = "\n".join(lines) if lines else NO_MISMATCH
    count = f" ({len(lines)} mismatch{'es' if len(lines) != 1 else ''})" if lines else ""
    return f"{REPORT_MARKER} {title}{count}:\n{body}"
