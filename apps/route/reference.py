"""Reference agents of the routing app: oracle, heuristic and null replies.

All three are pure functions of the chat history (``[{"role", "content"}]``, the first user
message being the episode's reset observation), so they can be served statelessly over any
agent protocol.

* oracle -- replays the hidden repair sequence of the ground truth, one command per step,
  skipping the commands it already sent (read from its own earlier replies), then stops; on a
  healthy control it declares the network healthy at once.
* heuristic -- no ground truth: declares the network healthy when the initial pingall lost
  nothing; otherwise runs a fixed diagnosis on ``r0`` (addresses and links, routes,
  forwarding sysctl, iptables, policy rules, qdiscs) and, after each diagnosis, repairs what
  deviates from the intended IP plan printed in the first observation.
* null -- stops at once without changing anything.
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import Any

from evaluator.multistep import assistant_steps, next_in_sequence, oracle_stop

from apps.route.faults import with_prefix
from apps.route.prompt import OUTPUT_MARKER, PINGALL_MARKER, PREFIX_LINE_RE
from apps.route.replies import DONE_REPLY, HEALTHY_REPLY, command_reply, parse_reply

#: The heuristic's diagnosis, in order (all on r0).
DIAGNOSES = (
    "ip addr show",
    "ip route show",
    "sysctl net.ipv4.ip_forward",
    "iptables-save",
    "ip rule show",
    "tc qdisc show",
)


#: The results line of the initial pingall (see ``PingallResult.render``): received, sent.
INITIAL_RESULTS_RE = re.compile(
    r"Initial pingall:\n(?:.*\n)*?\*\*\* Results: [0-9.]+% dropped \((\d+)/(\d+) received\)"
)


def initial_pingall_full(history: list[dict[str, Any]]) -> bool:
    """True when the first observation's initial pingall lost no pair."""
    match = INITIAL_RESULTS_RE.search(_first_user(history))
    return match is not None and match.group(1) == match.group(2)


def _first_user(history: list[dict[str, Any]]) -> str:
    for message in history:
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def episode_prefix(history: list[dict[str, Any]]) -> str:
    """The node-name prefix announced in the first observation ("" if absent)."""
    match = PREFIX_LINE_RE.search(_first_user(history))
    return match.group(1) if match else ""


def _steps(history: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """(command sent, output seen) for each assistant reply in ``history``."""
    steps: list[tuple[str | None, str]] = []
    for reply, observation in assistant_steps(history):
        parsed = parse_reply(reply)
        output = ""
        if OUTPUT_MARKER in observation:
            output = observation.split(OUTPUT_MARKER, 1)[1].split(PINGALL_MARKER, 1)[0]
        steps.append((parsed.command, output))
    return steps


def _sent(history: list[dict[str, Any]]) -> list[tuple[str | None, str | None]]:
    """(machine, command) of each assistant reply in ``history``."""
    return [
        (parsed.machine, parsed.command)
        for parsed in (parse_reply(reply) for reply, _ in assistant_steps(history))
    ]


def oracle_reply(ground_truth: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """Next step of the hidden repair sequence as a JSON reply, or ``{"done": true}``.

    The position in the sequence is recovered from the oracle's own earlier replies in
    ``history``: repair steps (machine and command) already sent, in order, are skipped.
    Repair entries are ``{"machine", "command"}`` (a bare string means ``r0``, version 1).
    """
    if ground_truth.get("healthy"):
        return oracle_stop(ground_truth, done_reply=DONE_REPLY, healthy_reply=HEALTHY_REPLY)
    prefix = episode_prefix(history)
    repair: list[tuple[str, str]] = []
    for item in ground_truth.get("repair", []):
        machine, command = (
            (str(item["machine"]), str(item["command"])) if isinstance(item, dict) else ("r0", item)
        )
        repair.append((machine, with_prefix(command, prefix)))
    step = next_in_sequence(repair, _sent(history))
    if step is not None:
        return command_reply(*step)
    return oracle_stop(ground_truth, done_reply=DONE_REPLY, healthy_reply=HEALTHY_REPLY)


def null_reply(history: list[dict[str, Any]]) -> str:
    """A well-formed reply that changes nothing: stop at once."""
    return DONE_REPLY


# heuristic ------------------------------------------------------------------------------
_PLAN_RE = re.compile(r"^\s+(\S+r0-eth\d+) (\d+\.\d+\.\d+)\.(\d+)/24 -> switch", re.M)


def _plan(history: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Router interface -> (its intended address, its subnet) from the first observation."""
    plan = {}
    for intf, net3, last in _PLAN_RE.findall(_first_user(history)):
        plan[intf] = (f"{net3}.{last}", f"{net3}.0/24")
    return plan


def _fix_addresses(output: str, plan: dict[str, tuple[str, str]]) -> list[str]:
    fixes: list[str] = []
    blocks = re.split(r"^\d+: ", output, flags=re.M)
    for block in blocks:
        header = re.match(r"([^:@\s]+)(?:@\S+)?: <([^>]*)> mtu (\d+)", block)
        if not header or header.group(1) not in plan:
            continue
        name, flags, mtu = header.group(1), header.group(2).split(","), int(header.group(3))
        address, _subnet = plan[name]
        if "UP" not in flags:
            fixes.append(f"ip link set {name} up")
        if mtu < 1500:
            fixes.append(f"ip link set {name} mtu 1500")
        inet = re.findall(r"^\s+inet (\S+)", block, flags=re.M)
        if f"{address}/24" not in inet:
            fixes.append(f"ip addr add {address}/24 brd + dev {name}")
        # add the right address before removing wrong ones (see faults.make_fault, RI)
        fixes += [f"ip addr del {wrong} dev {name}" for wrong in inet if wrong != f"{address}/24"]
    return fixes


def _fix_routes(output: str, plan: dict[str, tuple[str, str]]) -> list[str]:
    fixes: list[str] = []
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for intf, (address, subnet) in sorted(plan.items()):
        good = False
        for line in lines:
            tokens = line.split()
            if not tokens or tokens[0] != subnet:
                continue
            fields = dict(zip(tokens[1::2], tokens[2::2], strict=False))
            if fields.get("dev") == intf and "via" not in fields and "metric" not in fields:
                good = True
                continue
            selector = [subnet]
            for key in ("via", "dev", "metric"):
                if key in fields:
                    selector += [key, fields[key]]
            fixes.append("ip route del " + " ".join(selector))
        if not good:
            fixes.append(f"ip route add {subnet} dev {intf} proto kernel scope link src {address}")
    return fixes


def fix_iptables(output: str) -> list[str]:
    """Repairs for ``iptables-save``: DROP policies back to ACCEPT, DROP/REJECT rules deleted."""
    fixes: list[str] = []
    table = "filter"
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chain, policy = line[1:].split()[:2]
            if policy == "DROP":
                fixes.append(f"iptables -t {table} -P {chain} ACCEPT")
        elif line.startswith("-A ") and re.search(r"-j (DROP|REJECT)\b", line):
            rule = line[3:]
            prefix = "" if table == "filter" else f"-t {table} "
            fixes.append(f"iptables {prefix}-D {rule}")
    return fixes


def _fix_rules(output: str) -> list[str]:
    fixes: list[str] = []
    for line in output.splitlines():
        match = re.match(r"^(\d+):\s.*\b(prohibit|blackhole|unreachable)\b", line.strip())
        if match:
            fixes.append(f"ip rule del pref {match.group(1)}")
    return fixes


def fix_qdiscs(output: str, plan: Container[str]) -> list[str]:
    """Repairs for ``tc qdisc show``: a TBF/netem/HTB root qdisc on an interface of ``plan``
    (interface names) is removed."""
    fixes: list[str] = []
    for line in output.splitlines():
        match = re.match(r"^qdisc (\S+) \S+ dev (\S+) root", line.strip())
        if match and match.group(1) in ("tbf", "netem", "htb") and match.group(2) in plan:
            fixes.append(f"tc qdisc del dev {match.group(2)} root")
    return fixes


def _fix_forwarding(output: str) -> list[str]:
    if re.search(r"net\.ipv4\.ip_forward\s*=\s*0", output):
        return ["sysctl -w net.ipv4.ip_forward=1"]
    return []


def heuristic_fixes(diagnosis: str, output: str, plan: dict[str, tuple[str, str]]) -> list[str]:
    """Repair commands for what ``output`` of ``diagnosis`` shows wrong w.r.t. ``plan``."""
    if diagnosis == "ip addr show":
        return _fix_addresses(output, plan)
    if diagnosis == "ip route show":
        return _fix_routes(output, plan)
    if diagnosis == "sysctl net.ipv4.ip_forward":
        return _fix_forwarding(output)
    if diagnosis == "iptables-save":
        return fix_iptables(output)
    if diagnosis == "ip rule show":
        return _fix_rules(output)
    return fix_qdiscs(output, plan)


def heuristic_reply(history: list[dict[str, Any]]) -> str:
    """Next step of the scripted operator (diagnose r0, repair deviations, move on).

    For each diagnosis in :data:`DIAGNOSES`: run it if it was never run, else send the first of
    its derived fixes not yet sent since its latest run; when all are done, stop. A network
    whose initial pingall lost nothing is declared healthy at once (what a script can see).
    """
    if initial_pingall_full(history):
        return HEALTHY_REPLY
    plan = _plan(history)
    steps = _steps(history)
    for diagnosis in DIAGNOSES:
        runs = [i for i, (cmd, _out) in enumerate(steps) if cmd == diagnosis]
        if not runs:
            return command_reply("r0", diagnosis)
        latest = runs[-1]
        sent_after = {cmd for cmd, _out in steps[latest + 1 :] if cmd}
        for fix in heuristic_fixes(diagnosis, steps[latest][1], plan):
            if fix not in sent_after:
                return command_reply("r0", fix)
    return DONE_REPLY
