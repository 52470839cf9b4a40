"""Template filters that format rates and intervals."""

from __future__ import annotations

import math

from django import template

from evaluator.stats import Interval

register = template.Library()


@register.filter
def pct(value: float | None) -> str:
    """0.873 -> '87.3' (no percent sign); NaN/None -> '–'."""
    if value is None or math.isnan(value):
        return "–"
    return f"{100 * value:.1f}"


@register.filter
def interval_pct(interval: Interval) -> str:
    """A rate interval as '[80.1, 92.4]'."""
    if math.isnan(interval.value):
        return ""
    return f"[{100 * interval.low:.1f}, {100 * interval.high:.1f}]"


@register.filter
def seconds(interval: Interval) -> str:
    """A latency interval as '0.412 s ± [0.390, 0.433]'."""
    if math.isnan(interval.value):
        return "–"
    return f"{interval.value:.3f} s [{interval.low:.3f}, {interval.high:.3f}]"


@register.filter
def number(value: float | None) -> str:
    """A mean count as '12.5'; NaN/None -> '–'."""
    if value is None or math.isnan(value):
        return "–"
    return f"{value:.1f}"


@register.filter
def raw(value: float | None) -> str:
    """A number for a ``data-value`` sort key ('' for NaN/None, which sort last)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(float(value))


#: Chart element ids per kind; the label spider keeps its earlier id ``spider-<app>``.
CHART_IDS = {"ci": "ci", "scatter": "scatter", "levels": "levels", "labels": "spider"}


@register.filter
def chart_id(kind: str, app_id: str) -> str:
    """Element id of a chart: ``ci-malt``, ``scatter-malt``, ``levels-malt``, ``spider-malt``."""
    return f"{CHART_IDS.get(kind, kind)}-{app_id}"


@register.filter
def chart_data_id(kind: str, app_id: str) -> str:
    """Element id of a chart's JSON: ``ci-data-malt`` and so on."""
    return f"{CHART_IDS.get(kind, kind)}-data-{app_id}"


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON text of a stored value (rendered escaped inside ``<pre>``)."""
    import json

    return json.dumps(value, indent=2, sort_keys=True, default=str)
