"""What an app declares to the AgentBeats green agent: its ``config`` keys
(:class:`ConfigKey`, :meth:`evaluator.app.App.green_config_keys`) and, for an app that
reproduces one of NetArena's, how NetArena counts and reports its queries
(:class:`NetArenaProfile`, :meth:`evaluator.app.App.netarena_profile`).

Plain data, importing nothing of the engine: :mod:`evaluator.app` names these types, and the
green agent's modules (:mod:`evaluator.green.request`, :mod:`evaluator.green.counts`) import
the app contract, so the declarations sit below both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ConfigKey:
    """One ``config`` key of an app's green agent.

    Attributes:
        name: the key as NetArena's scenario files spell it.
        default: the value when the key is absent (``None``: see ``doc``).
        origin: ``"netarena"`` (NetArena's green agent takes it) or ``"ours"``.
        effect: ``"applied"`` or ``"none"`` (accepted, type-checked, reported in
            ``not_applied`` with ``doc`` as the reason).
        doc: what it does here, or why it has no effect (docs/agentbeats.md repeats it).
        check: validates and normalises a given value; raises ``ValueError`` with the reason.
    """

    name: str
    default: Any
    origin: str
    effect: str
    doc: str
    check: Callable[[Any], Any] = field(repr=False, compare=False)


#: NetArena's per-query result formats, named after the NetArena application directory whose
#: green agent writes them (:mod:`evaluator.green.netarena`): ``app-malt`` (``Query``,
#: ``Label``, ``Result-*``), ``app-route`` (``error_type``, ``iterations`` = replies + 1),
#: ``app-k8s`` (``error_detail``, ``iterations`` = replies).
ResultFormat = Literal["app-malt", "app-route", "app-k8s"]


@dataclass(frozen=True)
class NetArenaProfile:
    """How NetArena's own green agent counts and reports the queries of an app that
    reproduces one of NetArena's applications; the app declares it
    (:meth:`evaluator.app.App.netarena_profile`). An app without one is assessed on
    ``num_queries`` queries per level and its records carry no NetArena fields.

    Attributes:
        result_format: NetArena's per-query record and summary (:data:`ResultFormat`).
        types: level -> {NetArena query type -> our label tuple}, in NetArena's order (pairs
            joined by ``+`` in NetArena's catalogue order). Levels absent have no types.
        caps: NetArena types whose count stops below ``num_queries``, with the bound.
        labels_per_level: level -> how many label combinations of ours its batch cycles
            through (sizes the first batch tried,
            :func:`evaluator.green.counts.first_batch_size`).
        healthy_share: the share of healthy controls in a batch (0 for an app without).
    """

    result_format: ResultFormat
    types: Mapping[int, Mapping[str, tuple[str, ...]]]
    labels_per_level: Mapping[int, int]
    caps: Mapping[str, int] = field(default_factory=dict)
    healthy_share: float = 0.0
