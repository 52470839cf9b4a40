"""Route query generation: labels, topology shape, fault methods and operands from the seed.

Pure and fast (no emulator): the seed fixes the labels, the topology (its size grows with the
level), the faulted machines, the fault methods, every operand and the distractors; rules in
:mod:`apps.route.faults` exclude the operands that would not break pingall. The ground truth is
the list of faults with their machine, injection and repair commands, the distractors, and the
whole repair sequence as ``{"machine", "command"}`` steps.
"""

from __future__ import annotations

import random

from evaluator.sampling import draw_labels
from evaluator.types import Query

from apps.route.faults import LEVEL_LABELS, level_of, sample_ground_truth
from apps.route.prompt import render_prompt


def generate_queries(
    count: int,
    seed: int,
    level: int | None,
    *,
    app_id: str,
    version: int,
    levels: tuple[int, ...],
    switches: tuple[int, int] | None,
    hosts: tuple[int, int] | None,
    max_steps: int,
    healthy_share: float = 0.0,
) -> list[Query]:
    """Return ``count`` route queries for ``seed`` (see :meth:`apps.route.app.RouteApp.generate`).

    ``switches``/``hosts`` are inclusive ranges of the subnet count and hosts per subnet (None:
    the level's, :data:`apps.route.faults.LEVEL_SHAPES`); ``max_steps`` is the step budget the
    prompt announces. ``healthy_share`` of the queries (chosen by
    :func:`evaluator.sampling.draw_labels`) are healthy controls: label ``HEALTHY``, the
    level's topology and distractors, no fault, ``ground_truth["healthy"] = True``, and the
    same prompt as every other query.

    Raises:
        ValueError: negative count or a level not in ``levels``.
    """
    draws = draw_labels(
        LEVEL_LABELS,
        level_of=level_of,
        app_id=app_id,
        version=version,
        seed=seed,
        count=count,
        level=level,
        levels=levels,
        healthy_share=healthy_share,
    )
    queries = []
    for index, (labels, level_index, control) in enumerate(draws):
        rng = random.Random(f"route/v{version}/{seed}/{index}/{'+'.join(labels)}")
        truth = sample_ground_truth(
            () if control else labels, rng, level=level_index, switches=switches, hosts=hosts
        )
        if control:
            truth["healthy"] = True
        shape = truth["topology"]
        prompt = render_prompt(
            num_switches=shape["num_switches"],
            hosts_per_switch=shape["hosts_per_switch"],
            num_routers=shape["num_routers"],
            max_steps=max_steps,
        )
        queries.append(
            Query(
                app_id=app_id,
                app_version=version,
                seed=seed,
                index=index,
                level=level_index,
                labels=labels,
                prompt=prompt,
                ground_truth=truth,
            )
        )
    return queries
