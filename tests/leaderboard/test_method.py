"""The method pages: the user-facing docs rendered on the site, and no page pointing at a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaderboard.method import METHOD_DOCS, _rewrite, method_doc, method_url, render_doc

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
#: A file path a visitor would have to look up in a repository.
DOC_PATH = re.compile(r"docs/[\w.-]+\.md")
METHOD_TAG = re.compile(r'\{% method "([\w-]+)"(?: "([^"]+)")? %\}')


def _anchors(slug: str) -> set[str]:
    doc = method_doc(slug)
    assert doc is not None, slug
    return {anchor for _, anchor, _ in render_doc(doc).headings}


def test_index_lists_every_document_and_footer_links_it(client):
    body = client.get("/method/").content.decode()
    for doc in METHOD_DOCS:
        assert f'href="/method/{doc.slug}/"' in body
    board = client.get("/").content.decode()
    assert re.search(r'<footer[^>]*>.*href="/method/"', board, re.S)


@pytest.mark.parametrize("doc", METHOD_DOCS, ids=lambda d: d.slug)
def test_each_document_renders_with_anchored_headings_and_no_file_paths(client, doc):
    page = client.get(f"/method/{doc.slug}/")
    assert page.status_code == 200
    body = page.content.decode()
    ids = re.findall(r'<h[2-4] id="([\w-]+)"', body)
    assert ids and len(ids) == len(set(ids))
    for anchor in ids:  # each heading links to itself
        assert f'href="#{anchor}"' in body
    assert not DOC_PATH.search(body), DOC_PATH.search(body)
    assert not re.search(r'href="[^"]*\.md[#"]', body)
    # every link into the method resolves, anchor included
    for slug, anchor in re.findall(r'href="/method/([\w-]+)/(?:#([\w-]+))?"', body):
        if anchor:
            assert anchor in _anchors(slug), (doc.slug, slug, anchor)


def test_security_page_shows_team_facing_sections_only(client):
    body = client.get("/method/limits-and-disclosure/").content.decode()
    assert 'id="what-each-audience-sees"' in body and 'id="site-limits-settings"' in body
    assert 'id="threat-model"' not in body and 'id="controls"' not in body


def test_unknown_document_is_404(client):
    assert client.get("/method/architecture/").status_code == 404


def test_links_between_docs_become_method_urls_and_file_links_plain_text():
    rendered = _rewrite(
        '<p><a href="metrics.md#ranks-and-ties">metrics.md</a> and '
        '<a href="../evaluator/stats.py">the stats</a>; see docs/agents.md, '
        "&quot;The pre-flight check&quot;; and <code>docs/architecture.md</code>.</p>"
    )
    assert '<a href="/method/metrics/#ranks-and-ties">Metrics</a>' in rendered
    assert '<span class="repo-file">the stats</span>' in rendered
    assert "stats.py" not in rendered
    assert '<a href="/method/agents/#the-pre-flight-check">' in rendered
    assert "architecture.md" not in rendered and "(in the repository)" in rendered


def test_templates_cite_no_file_and_their_method_links_resolve():
    cited: list[tuple[str, str]] = []
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        assert not DOC_PATH.search(text), f"{path} cites {DOC_PATH.search(text)}"
        if METHOD_TAG.search(text):
            assert "method_links" in text, f"{path} uses {{% method %}} without loading it"
        cited += METHOD_TAG.findall(text)
    assert len(cited) >= 8
    for slug, heading in cited:
        url = method_url(slug, heading)
        if heading:
            assert url.split("#")[1] in _anchors(slug), (slug, heading)
