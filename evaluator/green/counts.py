"""NetArena's query counts and query types, mapped onto this engine's labels.

NetArena's green agents take ``num_queries`` as queries **per query type**:

* MALT (its query generator, ``app-malt/dy_query_generation.py``): per operation type of each
  requested level. Level 1 has four (add, rank, remove, list), level 2 three (remove-list,
  remove-rank, remove-count), level 3 three (add-list, add-rank, add-count).
* route (``generate_config`` in ``app-route/advanced_error_function.py``): per error type, the
  five single ones and the ten pairs of them, fifteen in all; no levels.
* k8s (``generate_config`` in ``app-k8s/inject_errors.py``): likewise five single and ten paired
  error types, except that single ``remove_ingress`` queries stop at 14 and single
  ``change_protocol`` ones at 20 (the combinations its catalogue has).

Every NetArena type is one label combination of ours (MALT's at the level NetArena gives it;
route's and k8s's fifteen are exactly the paper's Tables 5 and 6, which spread them over our
three levels). :func:`plan_netarena_level` walks a level's batch and keeps, in batch order,
the first ``num_queries`` queries of every NetArena type of that level (MALT's other labels,
``update``, ``count``, ``if-else``, ``for-loop``, are skipped), plus the healthy controls
(label ``HEALTHY``, route and k8s) met on the way: NetArena has none, so they are extra
queries, and NetArena's figures leave them out (:mod:`evaluator.green.netarena`).

Each of these apps declares its types in its own package (``apps/<app>/green.py``, a
:class:`NetArenaProfile` returned by :meth:`evaluator.app.App.netarena_profile`); nothing here
names an app. An app without a profile is not one of NetArena's: its ``num_queries`` are the
first of each level's batch (:func:`evaluator.green.assessment.plan_queries`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from evaluator.app import App
from evaluator.green.declarations import NetArenaProfile
from evaluator.registry import get_app
from evaluator.sampling import HEALTHY_LABEL
from evaluator.types import Query
from evaluator.variants import generate_batch

#: How many times a level's batch may be doubled while looking for every type's queries.
MAX_DOUBLINGS = 8


def fault_pair_types(
    level_labels: Mapping[int, list[tuple[str, ...]]], names: Mapping[str, str]
) -> dict[int, dict[str, tuple[str, ...]]]:
    """NetArena's error types of a fault-injection app (route, k8s) by level: every label
    tuple of ours at a level, named by NetArena's error type names (``names``: our fault
    label -> NetArena's name, in NetArena's catalogue order), pairs joined by ``+`` in that
    order.

    Raises:
        KeyError, ValueError: a label without a NetArena name.
    """
    order = list(names)
    types: dict[int, dict[str, tuple[str, ...]]] = {}
    for level, group in level_labels.items():
        types[level] = {}
        for labels in group:
            ordered = sorted(labels, key=order.index)
            types[level]["+".join(names[label] for label in ordered)] = tuple(labels)
    return types


def netarena_profile(app_id: str) -> NetArenaProfile | None:
    """The NetArena profile ``app_id`` declares, or ``None`` (not one of NetArena's apps).

    Raises:
        UnknownAppError: ``app_id`` is not registered.
    """
    return get_app(app_id).netarena_profile()


def netarena_types(app_id: str, level: int) -> dict[str, tuple[str, ...]]:
    """NetArena's query types at ``level`` (MALT's operation types; route's and k8s's error
    types, pairs joined by ``+`` in NetArena's catalogue order, as NetArena's route results
    name them) -> our label tuple, as the app's :class:`NetArenaProfile` declares them.

    Raises:
        KeyError: an app or level without NetArena types.
    """
    profile = netarena_profile(app_id)
    if profile is None:
        raise KeyError(app_id)
    return dict(profile.types[level])


def netarena_type(app_id: str, level: int, labels: tuple[str, ...] | list[str]) -> str | None:
    """The NetArena query type of a query with ``labels`` at ``level``, or ``None`` when
    NetArena has no such type (a healthy control, a MALT label NetArena does not generate,
    a held-out pack's own label)."""
    wanted = tuple(labels)
    try:
        types = netarena_types(app_id, level)
    except KeyError:
        return None
    for name, ours in types.items():
        if ours == wanted:
            return name
    return None


def netarena_quota(app_id: str, level: int, num_queries: int) -> dict[str, int]:
    """Queries NetArena runs per type at ``level`` for ``num_queries`` (see the module
    docstring; the profile's capped types, k8s's single ones).

    Raises:
        KeyError: an app or level without NetArena types.
    """
    profile = netarena_profile(app_id)
    caps = profile.caps if profile is not None else {}
    return {
        name: min(num_queries, caps.get(name, num_queries))
        for name in netarena_types(app_id, level)
    }


def first_batch_size(app_id: str, level: int, wanted: int) -> int:
    """The first batch size tried for ``wanted`` queries of NetArena's types at ``level``:
    our labels cycle evenly through a batch, so it takes ``wanted`` scaled by our labels per
    NetArena type, less the healthy-control share, plus one round of labels (enough in one
    pass unless a held-out pack replaces queries).

    Raises:
        KeyError: an app or level without NetArena types.
    """
    profile = netarena_profile(app_id)
    if profile is None:
        raise KeyError(app_id)
    ours = profile.labels_per_level[level]
    types = len(netarena_types(app_id, level))
    return max(1, math.ceil(wanted * ours / types / (1 - profile.healthy_share)) + ours)


def plan_netarena_level(app: App, level: int, num_queries: int, seed: int) -> list[Query]:
    """The queries of one level as NetArena counts them: in the order of the batch of
    ``seed`` at ``level``, the first ``netarena_quota`` queries of each NetArena type, and the
    healthy controls before the last of them.

    Raises:
        ValueError: the batch (doubled :data:`MAX_DOUBLINGS` times) does not hold enough
            queries of some type (a held-out pack that replaces most of the public queries),
            or as :func:`evaluator.variants.generate_batch`.
    """
    quota = netarena_quota(app.app_id, level, num_queries)
    count = first_batch_size(app.app_id, level, sum(quota.values()))
    for _ in range(MAX_DOUBLINGS + 1):
        have: Counter[str] = Counter()
        chosen: list[Query] = []
        for query in generate_batch(app, count, seed, level):
            if sum(have.values()) == sum(quota.values()):
                break
            if HEALTHY_LABEL in query.labels:
                chosen.append(query)
                continue
            name = netarena_type(app.app_id, level, query.labels)
            if name is not None and have[name] < quota[name]:
                have[name] += 1
                chosen.append(query)
        if have == Counter(quota):
            return chosen
        count *= 2
    missing = {name: quota[name] - have[name] for name in quota if have[name] < quota[name]}
    raise ValueError(
        f"the {app.app_id} batch of seed {seed} at level {level} lacks queries of {missing}"
    )
