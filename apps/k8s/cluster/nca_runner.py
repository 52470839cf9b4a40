"""Run network-config-analyzer (nca) on many small worlds in one process; stdlib only.

Executed by the Python of the dedicated nca virtualenv (see :mod:`apps.k8s.cluster.nca_oracle`),
never imported by the project. Reads JSON from stdin::

    [{"id": str, "pods": PodList, "namespaces": NamespaceList, "policies": NetworkPolicyList}]

and writes JSON to stdout::

    {id: {"src_ns/src_pod": {"dst_ns/dst_pod": ["TCP/80", ...]}}}

listing, for every ordered pod pair, the probed ports (each pod's declared containerPorts) that
nca says are allowed. nca's ``txt_no_fw_rules`` lines look like
``ns/a[Pod] => ns/b[Pod] : {protocols:TCP,dst_ports:80,90-99}`` or ``... : All connections``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

LINE = re.compile(
    r"^(?P<src>[^\s\[]+)(?:\[Pod\])? => (?P<dst>[^\s\[]+)(?:\[Pod\])? : (?P<conn>.+)$"
)


def _in_ranges(port: int, ranges: list[str]) -> bool:
    for r in ranges:
        low, _, high = r.partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


def _parse_conn(conn: str) -> list[tuple[set[str] | None, list[str] | None]]:
    """``{protocols:TCP,UDP,dst_ports:80,90-99}`` -> ``[({'TCP','UDP'}, ['80','90-99'])]``."""
    conn = conn.strip()
    if conn == "All connections":
        return [(None, None)]
    result = []
    for group in re.findall(r"\{([^}]*)\}", conn):
        fields: dict[str, list[str]] = {}
        key = ""
        for token in group.split(","):
            token = token.strip()
            if ":" in token:
                key, _, token = token.partition(":")
            fields.setdefault(key, []).append(token)
        protocols = set(fields["protocols"]) if "protocols" in fields else None
        result.append((protocols, fields.get("dst_ports")))
    return result


def _declared_ports(pods: dict[str, Any]) -> dict[str, list[tuple[str, int]]]:
    ports = {}
    for pod in pods["items"]:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        ports[key] = sorted({
            (p.get("protocol", "TCP"), int(p["containerPort"]))
            for c in pod["spec"]["containers"] for p in c.get("ports") or []
        })
    return ports


def analyse(world: dict[str, Any], workdir: Path) -> dict[str, dict[str, list[str]]]:
    """Allowed probed ports per ordered pod pair of one world, according to nca."""
    from nca.nca_cli import nca_main

    for name in ("pods", "namespaces", "policies"):
        (workdir / f"{name}.yaml").write_text(json.dumps(world[name]))
    out = workdir / "out.txt"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = nca_main([
            "--connectivity", str(workdir / "policies.yaml"),
            "--pod_list", str(workdir / "pods.yaml"),
            "--ns_list", str(workdir / "namespaces.yaml"),
            "--output_endpoints", "pods",
            "-o", "txt_no_fw_rules", "-f", str(out),
        ])
    if rc not in (0, 1) or not out.exists():
        raise RuntimeError(f"nca failed on world {world['id']} (rc={rc})")
    declared = _declared_ports(world["pods"])
    allowed: dict[str, dict[str, set[str]]] = {
        s: {d: set() for d in declared if d != s} for s in declared
    }
    for line in out.read_text().splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        src, dst = match["src"], match["dst"]
        if src not in allowed or dst not in allowed[src]:
            continue
        for protocols, ranges in _parse_conn(match["conn"]):
            for proto, port in declared[dst]:
                if (protocols is None or proto in protocols) and (
                    ranges is None or _in_ranges(port, ranges)
                ):
                    allowed[src][dst].add(f"{proto}/{port}")
    return {s: {d: sorted(p) for d, p in row.items()} for s, row in allowed.items()}


def _analyse_forked(world: dict[str, Any], workdir: Path) -> dict[str, dict[str, list[str]]]:
    """:func:`analyse` in a forked child, so that no module-level state nca may keep from one
    world can reach the next: every world starts from the state right after import."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        code = 0
        try:
            data = json.dumps(analyse(world, workdir)).encode()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            data = json.dumps({"__error__": repr(exc)}).encode()
            code = 1
        with os.fdopen(write_fd, "wb") as out:
            out.write(data)
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(data)
    if "__error__" in result:
        raise RuntimeError(f"nca failed on world {world['id']}: {result['__error__']}")
    return result


def main() -> None:
    import nca.nca_cli  # noqa: F401 - imported once, before the per-world forks

    worlds = json.load(sys.stdin)
    results = {}
    with tempfile.TemporaryDirectory(prefix="nca-") as tmp:
        for index, world in enumerate(worlds):
            # A fresh directory per world: with one shared directory, nca's answer for a world
            # depended on the worlds analysed before it (seen with diff01 after diff00).
            workdir = Path(tmp) / str(index)
            workdir.mkdir()
            results[world["id"]] = _analyse_forked(world, workdir)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
