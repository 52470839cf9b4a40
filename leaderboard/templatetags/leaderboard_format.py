"""Template filters that format rates and intervals."""

from __future__ import annotations

import math
from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

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


def _rate_cell(interval: Interval, *, strong: bool = False) -> SafeString:
    """A rate cell: percent, interval in ``<small>``, ``data-value`` for sorting."""
    text = pct(interval.value)
    return format_html(
        '<td class="num" data-value="{}">{}{}{} <small>{}</small></td>',
        raw(interval.value),
        mark_safe("<strong>") if strong else "",
        text,
        mark_safe("</strong>") if strong else "",
        interval_pct(interval),
    )


def _seconds_stacked(interval: Interval) -> SafeString:
    """A latency interval for a narrow cell: '0.412 s' over '[0.390, 0.433]' (in ``<small>``)."""
    if math.isnan(interval.value):
        return mark_safe("–")
    return format_html(
        "{} s <small>[{}, {}]</small>",
        f"{interval.value:.3f}",
        f"{interval.low:.3f}",
        f"{interval.high:.3f}",
    )


def _num_cell(sort_value: float | None, text: str, *, more: bool = False) -> SafeString:
    return format_html(
        '<td class="num"{} data-value="{}">{}</td>', MORE if more else "", raw(sort_value), text
    )


@register.filter
def gap_points(gap: Interval | None) -> str:
    """A rate difference in signed percentage points with its interval: ``-42 [-60, -21]``."""
    if gap is None or gap.n == 0 or math.isnan(gap.value):
        return "–"
    return f"{100 * gap.value:+.0f} [{100 * gap.low:+.0f}, {100 * gap.high:+.0f}]"


def held_out_cell(row: Any) -> SafeString:
    """Held-out correct-and-safe rate and the gap to the public rate (percentage points, 95%
    Newcombe interval); sorted by the gap. "–" when the submission had no held-out queries."""
    held_out, gap = row.held_out, row.held_out_gap
    if held_out is None or gap is None:
        return mark_safe('<td class="num held-out" data-value="">–</td>')
    return format_html(
        '<td class="num held-out" data-value="{}" title="public {} ({} queries), held-out {} '
        '({} queries)">{} <small>gap {} pts [{}, {}]</small></td>',
        raw(gap.value),
        pct(row.public.value),
        row.public.n,
        pct(held_out.value),
        held_out.n,
        pct(held_out.value),
        f"{100 * gap.value:+.0f}",
        f"{100 * gap.low:+.0f}",
        f"{100 * gap.high:+.0f}",
    )


#: Marks a cell of :func:`standing_row` shown only with "More columns" ticked (acted, by
#: level, agent seconds, steps, tokens, infrastructure failures; index.html marks the headings).
MORE = mark_safe(" data-more")


@register.simple_tag
def standing_row(row: Any, selected: Any = ()) -> SafeString:
    """One ``<tr>`` of the board's table (``templates/leaderboard/index.html`` names the
    columns). Built here in one call rather than with ~50 template variables: a page of 45 rows
    renders in a few milliseconds instead of ~40 (docs/site-performance.md). Every value is
    escaped by ``format_html``."""
    agent = row.agent
    submission = row.submission
    checked = mark_safe(" checked") if agent.pk in selected else ""
    badge = format_html(
        "{}{}",
        mark_safe(' <span class="badge">reference</span>') if agent.is_reference else "",
        mark_safe(
            ' <span class="badge overfit" data-testid="overfit" title="correct and safe on '
            "held-out queries significantly below its public rate: overfit to the public "
            'generator">overfit</span>'
        )
        if row.overfit
        else "",
    )
    levels = format_html_join(
        " ",
        '<span title="level {}: {}, n={}">L{} {}</span>',
        ((level, interval_pct(i), i.n, level, pct(i.value)) for level, i in row.levels.items()),
    )
    evaluated = (
        f"round {submission.round.number}" if submission.round else f"submission {submission.pk}"
    )
    finished = (
        timezone.localtime(row.finished_at).strftime("%Y-%m-%d %H:%M") if row.finished_at else ""
    )
    tokens = "–" if row.tokens_mean is None else f"{row.tokens_mean:.0f}"
    cells = [
        format_html(
            '<td><input type="checkbox" class="pick" value="{}" aria-label="compare {}"{}></td>',
            agent.pk,
            agent.name,
            checked,
        ),
        format_html('<td data-value="{}">{}</td>', row.rank, row.rank),
        format_html(
            '<td data-value="{}"><a href="{}">{}</a>{} <small class="protocol" '
            'title="the protocol the evaluator speaks to this agent">{}</small></td>',
            agent.name,
            reverse("agents:detail", args=[agent.pk]),
            agent.name,
            badge,
            agent.protocol,
        ),
        format_html('<td data-value="{}">{}</td>', agent.team.name, agent.team.name),
        _rate_cell(row.correct_and_safe, strong=True),
        _rate_cell(row.correctness),
        _rate_cell(row.safety),
        _num_cell(row.action_rate.value, pct(row.action_rate.value), more=True),
        _num_cell(row.blast_radius_mean.value, number(row.blast_radius_mean.value)),
        format_html('<td class="levels"{}>{}</td>', MORE, levels),
        _num_cell(row.latency_s.value, _seconds_stacked(row.latency_s)),
        _num_cell(row.agent_s.value, seconds(row.agent_s), more=True),
        _num_cell(row.steps_mean, number(row.steps_mean), more=True),
        _num_cell(row.tokens_mean, tokens, more=True),
        _num_cell(row.n, str(row.n)),
        format_html(
            '<td class="evaluated"><a href="{}">{}</a><small>{} UTC</small></td>',
            reverse("leaderboard:submission", args=[submission.pk]),
            evaluated,
            finished,
        ),
        held_out_cell(row),
        _num_cell(
            row.infra_failure_rate,
            format_html(
                '<span title="{} of {} episodes could not be run by the evaluator">{}</span>',
                row.infra_failures,
                row.n + row.infra_failures,
                pct(row.infra_failure_rate),
            ),
            more=True,
        ),
    ]
    return format_html(
        '<tr data-agent="{}">{}</tr>', agent.pk, format_html_join("", "{}", ((c,) for c in cells))
    )


@register.simple_tag
def figure_table(figure: dict[str, Any], caption: str) -> SafeString:
    """A spider chart's numbers as a table (its text alternative): one row per trace (agent),
    one column per axis (``theta``), the values (``r``, percent) in the cells; the polygon's
    closing point is left out."""
    traces = [t for t in figure.get("data", []) if isinstance(t, dict)]
    if not traces:
        return mark_safe("")
    axes = list(traces[0].get("theta", []))[:-1]
    head = format_html_join("", '<th scope="col" class="num">{}</th>', ((a,) for a in axes))
    rows = format_html_join(
        "",
        '<tr><th scope="row">{}</th>{}</tr>',
        (
            (
                t.get("name", ""),
                format_html_join(
                    "",
                    '<td class="num">{}</td>',
                    (("–" if v is None else f"{v:.1f}",) for v in list(t.get("r", []))[:-1]),
                ),
            )
            for t in traces
        ),
    )
    return format_html(
        '<table class="chart-table"><caption>{}</caption><thead><tr>'
        '<th scope="col">Agent</th>{}</tr></thead><tbody>{}</tbody></table>',
        caption,
        head,
        rows,
    )


@register.simple_tag
def series_table(figure: dict[str, Any], caption: str, value_label: str) -> SafeString:
    """A line chart's points as a table (its text alternative): one row per point, with its
    trace's name, its ``x`` (a time, shown to the minute) and its ``y``."""
    rows: list[tuple[str, str, str]] = []
    for trace in figure.get("data", []):
        if not isinstance(trace, dict) or trace.get("showlegend") is False:
            continue
        xs, ys = trace.get("x") or [], trace.get("y") or []
        for x, y in zip(xs, ys, strict=False):
            if y is None:
                continue
            when = str(x).replace("T", " ")[:16]
            value = f"{y:g}" if isinstance(y, int | float) else str(y)
            rows.append((str(trace.get("name", "")), when, value))
    if not rows:
        return mark_safe("")
    return format_html(
        '<table class="chart-table"><caption>{}</caption><thead><tr><th scope="col">App</th>'
        '<th scope="col">When (UTC)</th><th scope="col" class="num">{}</th></tr></thead>'
        "<tbody>{}</tbody></table>",
        caption,
        value_label,
        format_html_join("", '<tr><td>{}</td><td>{}</td><td class="num">{}</td></tr>', rows),
    )
