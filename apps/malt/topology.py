"""The MALT topology as a ``networkx.DiGraph``: loading, node identity and topology rules.

MALT names an entity by the pair (kind, name). A packet switch, the chassis that holds it and
its control point share a name but are three entities, so every node of our graph is keyed by
the string ``"<KIND>:<name>"`` (``"EK_PACKET_SWITCH:ju1.a1.m1.s2c1"``). Node attributes are
``name`` (str), ``type`` (the EK_* kind, a str) and the fields of the entity's ``*_attr``
message flattened onto the node (``physical_capacity_bps`` on ports, ``switch_loc`` on packet
switches, ``index_within_jupiter`` on superblocks, ``jupiter_type`` on the jupiter). Edges go
from the ``a`` to the ``z`` entity of a relationship and carry ``type`` (RK_CONTAINS or
RK_CONTROLS). The example file yields 6,133 nodes and 7,064 edges.

The parsed graph is kept once per process and pickled in a cache directory keyed by the
SHA-256 of the data file and the schema version, so Celery workers do not reparse the 1.8 MB
text file (about 0.7 s) on start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path

import networkx as nx
from google.protobuf.message import Message

from apps.malt.schema import ENUMS, message_to_attrs, parse_model

logger = logging.getLogger(__name__)

DATA_FILE = Path(__file__).resolve().parent / "data" / "malt-example-final.textproto"

#: Bump when the graph built from the same file changes (node keys, attribute layout).
GRAPH_FORMAT_VERSION = 1

#: The ten entity kinds of the example model (paper Appendix B.1: "10 distinct node types").
ENTITY_KINDS: tuple[str, ...] = ENUMS["EntityKind"][1:]

CONTAINS = "RK_CONTAINS"
CONTROLS = "RK_CONTROLS"
RELATION_KINDS: tuple[str, ...] = (CONTAINS, CONTROLS)

#: Every (source kind, relation, target kind) an edge may have. This is exactly the set of
#: triples present in the MALT example file (a test asserts it); it is the hierarchy of the
#: paper's Figure 6 restricted to what the data actually models (control points *control*
#: packet switches through RK_CONTROLS; they do not contain them).
ALLOWED_RELATIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("EK_JUPITER", CONTAINS, "EK_SUPERBLOCK"),
        ("EK_JUPITER", CONTAINS, "EK_SPINEBLOCK"),
        ("EK_SUPERBLOCK", CONTAINS, "EK_AGG_BLOCK"),
        ("EK_AGG_BLOCK", CONTAINS, "EK_PACKET_SWITCH"),
        ("EK_SPINEBLOCK", CONTAINS, "EK_PACKET_SWITCH"),
        ("EK_PACKET_SWITCH", CONTAINS, "EK_PORT"),
        ("EK_CHASSIS", CONTAINS, "EK_PACKET_SWITCH"),
        ("EK_CHASSIS", CONTAINS, "EK_CONTROL_POINT"),
        ("EK_RACK", CONTAINS, "EK_CHASSIS"),
        ("EK_CONTROL_DOMAIN", CONTAINS, "EK_CONTROL_POINT"),
        ("EK_CONTROL_POINT", CONTROLS, "EK_PACKET_SWITCH"),
    }
)

#: Smallest port capacity a topology may hold, in bit/s: the smallest capacity in the MALT
#: example (1 Gbit/s). The paper (§3, Appendix B.4) requires bandwidth over a minimum
#: threshold; we take the data's own floor as that threshold.
MIN_PORT_CAPACITY_BPS = 1_000_000_000

#: Attributes every node of a kind must carry besides ``name`` and ``type``.
REQUIRED_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "EK_PORT": ("physical_capacity_bps",),
    "EK_PACKET_SWITCH": ("switch_loc",),
}


def node_id(kind: str, name: str) -> str:
    """Return the graph key of entity (kind, name): ``"<KIND>:<name>"``."""
    return f"{kind}:{name}"


def split_node_id(key: str) -> tuple[str, str]:
    """Inverse of :func:`node_id`. Raises ``ValueError`` when ``key`` has no ``:``."""
    kind, sep, name = key.partition(":")
    if not sep:
        raise ValueError(f"not a MALT node id: {key!r}")
    return kind, name


def _enum_name(message: Message, field_name: str) -> str:
    """Return the value name of enum field ``field_name`` of ``message``."""
    field = message.DESCRIPTOR.fields_by_name[field_name]
    name: str = field.enum_type.values_by_number[getattr(message, field_name)].name
    return name


def build_graph(text: str) -> nx.DiGraph:
    """Parse MALT text format and build the graph described in the module docstring.

    Raises:
        google.protobuf.text_format.ParseError: malformed text or a field the schema lacks.
        ValueError: a duplicate entity, a relationship naming an unknown entity, or two
            relationships between the same ordered pair of entities.
    """
    model = parse_model(text)
    graph = nx.DiGraph()
    for entity in model.entity:
        kind = _enum_name(entity.id, "kind")
        key = node_id(kind, entity.id.name)
        if key in graph:
            raise ValueError(f"duplicate entity {key}")
        attrs: dict[str, object] = {"name": entity.id.name, "type": kind}
        for field, value in entity.ListFields():
            if field.name != "id":
                attrs.update(message_to_attrs(value))
        graph.add_node(key, **attrs)
    for relation in model.relationship:
        rel_kind = _enum_name(relation, "kind")
        source = node_id(_enum_name(relation.a, "kind"), relation.a.name)
        target = node_id(_enum_name(relation.z, "kind"), relation.z.name)
        if source not in graph or target not in graph:
            raise ValueError(f"{rel_kind} names an unknown entity: {source} -> {target}")
        if graph.has_edge(source, target):
            raise ValueError(f"two relationships between {source} and {target}")
        graph.add_edge(source, target, type=rel_kind)
    return graph


def data_sha256(path: Path = DATA_FILE) -> str:
    """Return the hex SHA-256 of the data file (the cache key)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_dir() -> Path:
    """Directory of the pickled-graph cache: ``$NETARENA_CACHE_DIR`` or ``~/.cache/netarena``."""
    root = os.environ.get("NETARENA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "netarena"
    )
    return Path(root) / "malt"


def _trusted(path: Path) -> bool:
    """A cache file is loaded only if we own it and nobody else can write it (pickle = code)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _load_uncached(path: Path) -> nx.DiGraph:
    digest = data_sha256(path)
    cache_file = cache_dir() / f"graph-v{GRAPH_FORMAT_VERSION}-{digest[:32]}.pickle"
    if _trusted(cache_file):
        try:
            with cache_file.open("rb") as handle:
                graph = pickle.load(handle)  # noqa: S301 - our own file, owner-checked above
            if isinstance(graph, nx.DiGraph):
                return graph
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            logger.warning("ignoring unreadable MALT graph cache %s: %s", cache_file, exc)
    graph = build_graph(path.read_text(encoding="utf-8"))
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=cache_file.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(graph, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o600)
        os.replace(tmp, cache_file)
    except OSError as exc:  # a read-only home is fine: we just reparse next time
        logger.info("MALT graph cache not written (%s)", exc)
    return graph


@cache
def load_graph(path: Path = DATA_FILE) -> nx.DiGraph:
    """Return the MALT example topology (shared per process; treat it as read-only).

    Callers must never mutate the returned graph: ground truth is computed on an overlay
    (:class:`apps.malt.overlay.TopologyView`) and agents get a pickled copy in the sandbox.

    Raises:
        OSError: the data file cannot be read.
        google.protobuf.text_format.ParseError / ValueError: see :func:`build_graph`.
    """
    return _load_uncached(path)


#: The ``Entity`` field holding the attributes of each kind that has any (malt.proto).
ATTRIBUTE_MESSAGES: dict[str, str] = {
    "EK_JUPITER": "jupiter_attr",
    "EK_SUPERBLOCK": "superblock_attr",
    "EK_PACKET_SWITCH": "packet_switch_attr",
    "EK_PORT": "port_attr",
}


def model_text(graph: nx.DiGraph) -> str:
    """``graph`` in MALT text format: the inverse of :func:`build_graph` (whose result on the
    text equals ``graph`` when ``graph`` is keyed and attributed as it builds graphs).

    Raises:
        google.protobuf.json_format.ParseError: a kind, relation or attribute the schema
            (:mod:`apps.malt.schema`) does not have.
        KeyError: a node without ``name``/``type`` or an edge without ``type``.
    """
    from google.protobuf import json_format, text_format

    from apps.malt.schema import model_class

    def entity_id(node: str) -> dict[str, str]:
        attrs = graph.nodes[node]
        return {"kind": attrs["type"], "name": attrs["name"]}

    entities = []
    for node, attrs in graph.nodes(data=True):
        entity: dict[str, object] = {"id": entity_id(node)}
        extra = {k: v for k, v in attrs.items() if k not in ("name", "type")}
        if extra:
            entity[ATTRIBUTE_MESSAGES.get(attrs["type"], f"{attrs['type'].lower()}_attr")] = extra
        entities.append(entity)
    relationships = [
        {"kind": attrs["type"], "a": entity_id(source), "z": entity_id(target)}
        for source, target, attrs in graph.edges(data=True)
    ]
    model = model_class()()
    json_format.ParseDict({"entity": entities, "relationship": relationships}, model)
    text: str = text_format.MessageToString(model)
    return text
