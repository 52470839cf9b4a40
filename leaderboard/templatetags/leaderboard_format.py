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
