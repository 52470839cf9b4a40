"""Every page a visitor, a team member or staff reaches (not the Django admin), in Chromium, at
1280 px and at 390 px: axe-core finds no serious or critical violation at either width, nothing
scrolls sideways, and no page cites a file.

One test loads each page once, checks it at 1280 px, narrows the viewport and checks it again at
390 px, in one browser context (visitor pages first, then logged in as a team member, then as
staff), with its data written straight into the database: a closed round (the board's ranking
of record) that spent a held-out pack, an open round with a sealed pack and a running
submission, a finished practice submission of an ``openai-tools`` agent whose episode carries a
tool call, an ``a2a`` agent's episode whose replies carry text, data and file parts, a running
practice submission, and an agent page. At 1280 px the board's
standings also fit their box without a scrollbar; at 390 px the navigation is a menu, the
standings scroll inside their own box with the rank and agent columns in view, and charts
fit their box. The board's sorting and agent selection are worked from the keyboard.

axe-core is vendored under ``tests/browser/vendor/axe-core/`` (its MPL-2.0 licence beside
it). ``NETARENA_SCREENSHOTS=<dir>`` saves a full-page screenshot of each page at each width.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from leaderboard.method import METHOD_DOCS
from submissions.aggregates import aggregates_rebuild
from submissions.models import Agent, EpisodeRecord, HeldOutPack, Round, Submission, Team

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
WIDE, NARROW = 1280, 390
HEIGHT = 900
APPS = ("malt", "route", "k8s")
PASSWORD = "quiet-Harbour-73"
DOC_PATH = re.compile(r"docs/[\w.-]+\.md")
#: Page loads here include Plotly's bundle; a busy shared runner needs more than the default.
LOADED_TIMEOUT_MS = 60_000

#: Runs axe on the page: the serious and critical violations, with a few of their nodes.
AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => ({id: v.id, impact: v.impact, help: v.help,
                  nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ") + " :: " +
                                                     n.failureSummary)}));
}"""
#: What overflows the viewport sideways (for the failure message).
OVERFLOW = """() => {
  const limit = window.innerWidth;
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.right > limit + 1 && box.width > 0) {
      let hidden = false;
      for (let p = el.parentElement; p; p = p.parentElement) {
        const o = getComputedStyle(p).overflowX;
        if (o === "auto" || o === "scroll" || o === "hidden") { hidden = true; break; }
      }
      if (!hidden) wide.push(el.tagName.toLowerCase() + "." + el.className + " " +
                             Math.round(box.right));
    }
  }
  return {scroll: document.documentElement.scrollWidth, inner: limit, wide: wide.slice(0, 8)};
}"""


def _episodes(submission: Submission, app_id: str, n: int, good: int, **extra: Any) -> None:
    """``n`` scored episodes of ``app_id``, the first ``good`` correct and safe."""
    EpisodeRecord.objects.bulk_create(
        EpisodeRecord(
            submission=submission,
            app_id=app_id,
            index=j,
            query_id=f"{app_id}-{submission.pk}-{j}",
            level=1 + j % 3,
            label="add" if j % 2 else "remove",
            query={"prompt": "Add a switch.", "ground_truth": {"faults": ["s1"]}},
            status=EpisodeRecord.Status.DONE,
            correct=j < good,
            safe=j < good or j % 3 == 0,
            latency_s=0.2 + 0.01 * j,
            agent_s=1.5,
            steps=2,
            changed_state=True,
            blast_radius=None if j < good or j % 3 == 0 else 3,
            input_tokens=1200,
            output_tokens=300,
            **extra,
        )
        for j in range(n)
    )


def _submission(agent: Agent, **fields: Any) -> Submission:
    now = timezone.now()
    defaults: dict[str, Any] = {
        "seed": 1,
        "apps": list(APPS),
        "queries_per_app": 12,
        "status": Submission.Status.FINISHED,
        "started_at": now - timedelta(minutes=9),
        "finished_at": now - timedelta(minutes=1),
    }
    return Submission.objects.create(agent=agent, **{**defaults, **fields})


TOOL_TRANSCRIPT = [
    {"role": "user", "content": "Add a new switch s9 to the topology and connect it to s1."},
    {
        "role": "assistant",
        "content": "def process_graph(graph):\n    graph.add_node('s9')\n    return graph",
        "latency_s": 0.4,
        "tool_call": {
            "name": "submit_code",
            "arguments": '{"code": "def process_graph(graph):\\n    graph.add_node(\'s9\')"}',
        },
    },
    {"role": "user", "content": "ok", "safe_step": True, "info": {"status": "ok"}},
]


#: An ``a2a`` agent's episode: a reply whose artifact has text, data and file parts, then one
#: plain text message.
A2A_TRANSCRIPT = [
    {"role": "user", "content": "Which switch lost its uplink? Answer with its name."},
    {
        "role": "assistant",
        "content": 's4\n{\n  "switch": "s4",\n  "evidence": ["uplink-s4-s1 down since 12:03"]\n}',
        "latency_s": 0.7,
        "parts": [
            {"kind": "text", "text": "s4"},
            {"kind": "data",
             "data": {"switch": "s4", "evidence": ["uplink-s4-s1 down since 12:03"]}},
            {"kind": "file", "name": "topology-after-the-failure-of-the-uplink.graphml",
             "mime_type": "application/graphml+xml"},
        ],
        "parts_from": "artifact",
    },
    {"role": "user", "content": "ok", "safe_step": True, "info": {"status": "ok"}},
    {
        "role": "assistant",
        "content": "s4",
        "latency_s": 0.3,
        "parts": [{"kind": "text", "text": "s4"}],
        "parts_from": "message",
    },
]  # fmt: skip


def _world() -> dict[str, Any]:
    """The site's data: a team member and a staff user, a closed round of six agents that spent
    a held-out pack (the ``a2a`` agent's episodes with parts), an open round with a sealed pack
    and a running submission, a finished practice submission of the member's ``openai-tools``
    agent (episodes with a tool call) and a running one. Returns the URLs' ids."""
    user = get_user_model().objects.create_user("ada", email="ada@example.org", password=PASSWORD)
    staff = get_user_model().objects.create_user(
        "grace", email="grace@example.org", password=PASSWORD, is_staff=True
    )
    team = Team.objects.create(name="Orbit Operations Collective")
    team.members.add(user)
    others = Team.objects.create(name="Packet Whisperers")
    agents = [
        Agent.objects.create(
            team=team,
            name="caller-with-a-fairly-long-name-v2",
            endpoint_url="https://93.184.215.14/v1",
            protocol="openai-tools",
            model_name="gpt-something",
            apps=list(APPS),
        ),
        Agent.objects.create(
            team=team, name="answerer", endpoint_url="https://93.184.215.14/a2a",
            protocol="a2a", apps=list(APPS),
        ),
    ] + [
        Agent.objects.create(
            team=others, name=f"baseline-{k}", endpoint_url="https://93.184.215.14/a",
            protocol="http-json", apps=list(APPS),
        )
        for k in range(4)
    ]  # fmt: skip
    evaluation_round = Round.objects.create(
        number=1, seed=7, apps=list(APPS), queries_per_app=12, closed_at=timezone.now(),
        commitment="ab" * 32, salt="cd" * 8,
    )  # fmt: skip
    made = []
    for k, agent in enumerate(agents):
        submission = _submission(agent, round=evaluation_round)
        for app_id in APPS:
            _episodes(submission, app_id, 12, 11 - k)
        made.append(submission)
    a2a_episode = EpisodeRecord.objects.filter(submission=made[1], app_id="malt").earliest("index")
    a2a_episode.transcript = A2A_TRANSCRIPT
    a2a_episode.save(update_fields=["transcript"])
    spent = HeldOutPack.objects.create(
        app_id="malt", name="phrasings-1", sha256="e3" * 32, archive=b"x",
        state=HeldOutPack.State.SPENT, spent_at=timezone.now(), spent_by=evaluation_round,
    )  # fmt: skip
    sealed = HeldOutPack.objects.create(app_id="route", name="topologies-2", sha256="9a" * 32)
    Round.objects.filter(pk=evaluation_round.pk).update(packs={"malt": {spent.name: spent.sha256}})
    open_round = Round.objects.create(
        number=2, seed=8, apps=list(APPS), queries_per_app=12, commitment="ef" * 32,
        salt="01" * 8, packs={"route": {sealed.name: sealed.sha256}},
    )  # fmt: skip
    in_round = _submission(
        agents[1], round=open_round, status=Submission.Status.RUNNING, finished_at=None
    )
    _episodes(in_round, "malt", 3, 2)
    finished = _submission(agents[0], seed=5)
    for app_id in APPS:
        _episodes(finished, app_id, 12, 9, transcript=TOOL_TRANSCRIPT)
    made.append(finished)
    running = _submission(agents[0], seed=6, status=Submission.Status.RUNNING, finished_at=None)
    _episodes(running, "malt", 4, 3)
    EpisodeRecord.objects.bulk_create(
        EpisodeRecord(
            submission=running, app_id="malt", index=j, query_id=f"r-{j}", level=1,
            label="add", query={}, status=EpisodeRecord.Status.PENDING,
        )
        for j in range(4, 12)
    )  # fmt: skip
    aggregates_rebuild(submission_ids=[s.pk for s in made])
    episode = EpisodeRecord.objects.filter(submission=finished, app_id="malt").earliest("index")
    return {
        "user": user,
        "staff": staff,
        "agent": agents[0].pk,
        "finished": finished.pk,
        "running": running.pk,
        "in_round": in_round.pk,
        "episode": episode.pk,
        "a2a_episode": a2a_episode.pk,
    }


def _check(page: Page, url: str, name: str, failures: list[str]) -> None:
    """One load of ``url``, checked at 1280 px then, narrowed, at 390 px: no sideways scroll, no
    serious or critical axe violation, no file path in the page's text (failures are
    collected, so one run reports them all). axe is injected once, after the load, and runs
    on the same page at both widths."""
    shots = os.environ.get("NETARENA_SCREENSHOTS")
    page.set_viewport_size({"width": WIDE, "height": HEIGHT})
    response = page.goto(url)
    assert response is not None and response.ok, f"{url}: {response and response.status}"
    if page.locator(".js-plotly-plot").count():
        page.wait_for_selector(".js-plotly-plot .main-svg")
    page.add_script_tag(path=str(AXE))
    text = page.locator("body").inner_text()
    if DOC_PATH.search(text):
        failures.append(f"{name}: cites {DOC_PATH.search(text)}")
    for width in (WIDE, NARROW):
        if width == NARROW:
            page.set_viewport_size({"width": NARROW, "height": HEIGHT})
            # Plotly resizes its charts on the window's resize event (debounced; on a busy
            # shared runner the board's charts have taken over 5 s)
            page.wait_for_function(
                """() => Array.from(document.querySelectorAll('.js-plotly-plot')).every(
                     (d) => d.querySelector('.main-svg').getBoundingClientRect().width
                            <= d.parentElement.clientWidth + 1)""",
                timeout=20_000,
            )
        overflow = page.evaluate(OVERFLOW)
        if overflow["scroll"] > overflow["inner"]:
            failures.append(f"{name} @{width}: scrollWidth {overflow['scroll']} {overflow['wide']}")
        for violation in page.evaluate(AXE_RUN):
            failures.append(f"{name} @{width}: axe {violation}")
        if shots:
            height = min(page.evaluate("document.documentElement.scrollHeight"), 2400)
            page.screenshot(
                path=f"{shots}/{name}-{width}.png",
                full_page=True,
                clip={"x": 0, "y": 0, "width": width, "height": height},
            )


def _log_in(context: BrowserContext, page: Page, user: Any) -> None:
    """Make the context's session ``user``'s (replacing any earlier one)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"]
    origin = urlsplit(page.url)
    context.clear_cookies()
    context.add_cookies(
        [{"name": "sessionid", "value": cookie.value, "url": f"{origin.scheme}://{origin.netloc}/"}]
    )


def _shows_the_tool_call(page: Page) -> None:
    """The episode page shows the call the ``openai-tools`` agent sent, and what it ran."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("tool-name").first).to_have_text("submit_code")
    expect(page.get_by_test_id("tool-arguments").first).to_contain_text('"code"')


def _shows_the_a2a_parts(page: Page) -> None:
    """The ``a2a`` agent's episode lists the parts of its first reply: text, data, file."""
    from playwright.sync_api import expect

    first = page.get_by_test_id("step").first
    expect(first.get_by_test_id("a2a-part")).to_have_count(3)
    expect(first.get_by_test_id("a2a-data")).to_contain_text('"switch": "s4"')
    expect(first.get_by_test_id("a2a-file")).to_contain_text("topology-after-the-failure")


def _charts_name_their_tables(page: Page) -> None:
    """The agent page's charts name their table, or carry their numbers."""
    from playwright.sync_api import expect

    expect(page.locator("#score-over-time-caption a")).to_have_attribute("href", "#history-table")
    ranks = page.locator("#rank-over-time-caption details")
    ranks.locator("summary").click()
    expect(ranks.locator("tbody tr").first).to_contain_text("malt")


def _staff_can_close_the_round(page: Page) -> None:
    """An open round's page offers staff its Close button."""
    from playwright.sync_api import expect

    expect(page.get_by_role("button", name=re.compile("Close the round"))).to_be_visible()


def _board_works_from_the_keyboard(page: Page) -> None:
    """The board, widened again after its checks: at 1280 px the standings fit their box, with
    more columns behind a toggle, sorting and agent selection work from the keyboard, charts
    name their tables; at 390 px the navigation is a menu and the standings scroll inside
    their box with the rank and agent columns in view."""
    from playwright.sync_api import expect

    page.set_viewport_size({"width": WIDE, "height": HEIGHT})
    # at 1280 px: the standings fit their box; more columns behind a toggle
    scroller = page.locator("#app-malt .table-scroll").first
    fits = "(box) => box.scrollWidth <= box.clientWidth"
    assert scroller.evaluate(fits)
    expect(page.locator("#app-malt th[data-sort=latency]")).to_be_visible()
    expect(page.locator("#app-malt th[data-sort=blast]")).to_be_visible()
    tokens = page.locator("#app-malt th[data-sort=tokens]")
    expect(tokens).to_be_hidden()
    # sorting from the keyboard: tab to the column's button, press Enter
    page.locator("#app-malt th[data-sort=cs] button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#app-malt th[data-sort=cs]")).to_have_attribute("aria-sort", "descending")
    page.keyboard.press(" ")
    expect(page.locator("#app-malt th[data-sort=cs]")).to_have_attribute("aria-sort", "ascending")
    # ticking an agent from the keyboard
    box = page.locator("#app-malt input.pick").first
    box.focus()
    page.keyboard.press(" ")
    expect(box).to_be_checked()
    expect(page.locator("#app-malt [data-testid=selection-status]")).to_contain_text("Comparing 1")
    # the secondary columns, from the keyboard too
    toggle = page.locator("#app-malt input.more-columns")
    toggle.focus()
    page.keyboard.press(" ")
    expect(tokens).to_be_visible()
    first_row = page.locator("#standings-malt tbody tr").first
    expect(first_row.locator("td").nth(13)).to_have_text("1500")  # tokens per episode
    expect(first_row.locator("td").last).to_have_text("0.0")  # infrastructure failures, %
    # each chart names the table it draws from
    expect(page.locator("#app-malt figure.chart-figure figcaption a").first).to_have_attribute(
        "href", "#standings-malt"
    )
    # the spider charts' numbers, as tables behind a disclosure
    levels = page.locator("#app-malt details.chart-data").first
    levels.locator("summary").click()
    expect(levels.locator("table.chart-table tbody tr")).to_have_count(6)
    expect(levels.locator("table.chart-table thead")).to_contain_text("L1 correct")

    # at 390 px: the menu opens, the table scrolls in its box, rank and agent stay
    page.set_viewport_size({"width": NARROW, "height": HEIGHT})
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_be_visible()
    expect(page.get_by_role("link", name="Rounds")).to_be_hidden()
    menu.click()
    expect(page.get_by_role("link", name="Rounds")).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "true")
    if shots := os.environ.get("NETARENA_SCREENSHOTS"):
        page.screenshot(path=f"{shots}/board-menu-open-{NARROW}.png")
    assert not scroller.evaluate(fits)  # it scrolls, inside its box
    agent_cell = page.locator("#standings-malt tbody tr").first.locator("td").nth(2)
    before = agent_cell.bounding_box()
    scroller.evaluate("(box) => { box.scrollLeft = 600; }")
    after = agent_cell.bounding_box()
    assert before is not None and after is not None
    assert abs(after["x"] - before["x"]) < 1  # sticky
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")


#: What is checked on a page right after its widths and axe, on the same load (page name ->
#: check).
FOLLOW_UPS: dict[str, Callable[[Page], None]] = {
    "board": _board_works_from_the_keyboard,
    "episode": _shows_the_tool_call,
    "episode-a2a": _shows_the_a2a_parts,
    "agent": _charts_name_their_tables,
    "staff-round-open": _staff_can_close_the_round,
}


def _walk(page: Page, pages: list[tuple[str, str]], failures: list[str]) -> None:
    """:func:`_check` each ``(url, name)`` and run its :data:`FOLLOW_UPS` check on the same
    load (a failed one is collected with the others)."""
    for url, name in pages:
        _check(page, url, name, failures)
        if name in FOLLOW_UPS:
            try:
                FOLLOW_UPS[name](page)
            except AssertionError as exc:
                failures.append(f"{name}: {exc}")


def test_every_page_is_accessible_and_fits_both_widths(page: Page) -> None:
    world = _world()
    page.set_default_timeout(LOADED_TIMEOUT_MS)
    failures: list[str] = []

    user = world["user"]
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    visitor_pages = [
        ("/accounts/signup/", "signup"),
        ("/accounts/login/", "login"),
        ("/accounts/password_reset/", "password-reset"),
        (f"/accounts/reset/{uid}/{token}/", "password-reset-confirm"),
    ]
    _walk(page, visitor_pages, failures)

    _log_in(page.context, page, user)
    member_pages = [
        ("/", "board"),
        ("/rounds/", "rounds"),
        ("/rounds/1/", "round"),
        (f"/submissions/{world['running']}/", "submission-running"),
        (f"/submissions/{world['finished']}/", "submission-finished"),
        (f"/episodes/{world['episode']}/", "episode"),
        (f"/episodes/{world['a2a_episode']}/", "episode-a2a"),
        (f"/agents/{world['agent']}/", "agent"),
        ("/accounts/team/", "team"),
        ("/accounts/agents/new/", "register-agent"),
        ("/accounts/submit/", "submit"),
        ("/method/", "method"),
        *((f"/method/{doc.slug}/", f"method-{doc.slug}") for doc in METHOD_DOCS),
    ]
    _walk(page, member_pages, failures)

    _log_in(page.context, page, world["staff"])
    staff_pages = [
        ("/rounds/new/", "staff-round-new"),
        ("/rounds/2/", "staff-round-open"),  # with its Close button
        (f"/submissions/{world['in_round']}/", "staff-submission-in-round"),
        (f"/episodes/{world['a2a_episode']}/", "staff-episode-a2a"),  # with the ground truth
        ("/packs/", "staff-packs"),
    ]
    _walk(page, staff_pages, failures)
    assert not failures, "\n".join(failures)
