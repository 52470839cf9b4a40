"""The method on the site: the repository's user-facing documents rendered as pages.

Each :class:`MethodDoc` names a Markdown file under ``docs/`` and the slug of its page
(``/method/<slug>/``). :func:`render_doc` turns the file into HTML with markdown-it-py (tables
on), gives every heading an ``id`` (the anchor GitHub would give it) and a "¶" link to itself,
and rewrites what points into the repository:

- a link or a plain mention of a method document (``docs/metrics.md``, ``metrics.md#ranks``,
  ``docs/metrics.md, "Ranks and ties"``) becomes a link to its page and anchor;
- a mention of any other file under ``docs/`` names that note in words, without a path;
- a link to any other repository file keeps its text and loses the link (a visitor has no
  repository to follow it into).

A document may be cut to some of its sections (``sections``): ``docs/security.md`` shows
teams its limits and what each audience sees, not the operators' controls.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.urls import reverse
from markdown_it import MarkdownIt


@dataclass(frozen=True)
class MethodDoc:
    """One document of the method.

    Attributes:
        slug: the page's URL part, ``/method/<slug>/``.
        filename: the file under ``docs/``.
        title: the page title (and the words links to it use).
        summary: one line on the method index.
        sections: level-2 headings to keep (all when empty); the text before the first
            level-2 heading is kept only when ``keep_intro``.
        keep_intro: keep the lead text (ignored when ``sections`` is empty).
    """

    slug: str
    filename: str
    title: str
    summary: str
    sections: tuple[str, ...] = ()
    keep_intro: bool = True


#: The method's documents, in the order of the index.
METHOD_DOCS: tuple[MethodDoc, ...] = (
    MethodDoc("metrics", "metrics.md", "Metrics", "What every figure on the board means."),
    MethodDoc(
        "result-format",
        "result-format.md",
        "Result file format",
        "The downloadable result file of a submission, field by field.",
    ),
    MethodDoc(
        "agent-protocols",
        "agent-protocols.md",
        "Agent protocols",
        "How the evaluator calls an agent: http-json, openai-chat, openai-tools, a2a.",
    ),
    MethodDoc(
        "agents",
        "agents.md",
        "Agents",
        "Registering an agent, its pre-flight check and its page.",
    ),
    MethodDoc(
        "training",
        "training.md",
        "Training",
        "The benchmark as a training ground: SFT data, Gymnasium environments, Inspect AI.",
    ),
    MethodDoc(
        "limits-and-disclosure",
        "security.md",
        "Limits and disclosure",
        "Quotas and log-in limits, and what each audience sees and when.",
        sections=("Site limits (settings)", "What each audience sees"),
        keep_intro=False,
    ),
    MethodDoc(
        "operating-rounds",
        "operating-rounds.md",
        "Rounds and held-out packs",
        "How rounds run and how held-out packs are sealed, drawn and spent.",
    ),
)

_BY_SLUG = {doc.slug: doc for doc in METHOD_DOCS}
_BY_FILE = {doc.filename: doc for doc in METHOD_DOCS}


def docs_dir() -> Path:
    """The repository's ``docs/`` directory."""
    return Path(settings.BASE_DIR) / "docs"


def method_doc(slug: str) -> MethodDoc | None:
    """The document whose page is ``/method/<slug>/``, or None."""
    return _BY_SLUG.get(slug)


def slugify_heading(text: str) -> str:
    """The anchor of a heading, as GitHub makes it: lower case, punctuation dropped (hyphens
    and underscores kept), each space a hyphen."""
    text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def method_url(slug: str, heading: str = "") -> str:
    """The URL of a method page, with the anchor of ``heading`` (a heading's text or an
    anchor already slugged) when given.

    Raises:
        KeyError: ``slug`` names no method document.
    """
    if slug not in _BY_SLUG:
        raise KeyError(slug)
    url = reverse("leaderboard:method-doc", args=[slug])
    return f"{url}#{slugify_heading(heading)}" if heading else url


def _doc_for_path(path: str) -> MethodDoc | None:
    """The method document a link path (``docs/x.md``, ``x.md``, ``../docs/x.md``) names."""
    return _BY_FILE.get(path.rsplit("/", 1)[-1])


def _note_title(filename: str) -> str:
    """The first heading of another ``docs/`` file (its file stem when there is none)."""
    path = docs_dir() / filename
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].replace("`", "").strip()
    return filename.removesuffix(".md").replace("-", " ")


def _select_sections(text: str, doc: MethodDoc) -> str:
    """The parts of a document its page shows (see :attr:`MethodDoc.sections`)."""
    if not doc.sections:
        return text
    parts = re.split(r"(?m)^(?=## )", text)
    kept = [parts[0]] if doc.keep_intro else []
    for part in parts[1:]:
        if part[3:].splitlines()[0].strip() in doc.sections:
            kept.append(part)
    return "".join(kept)


def _markdown() -> MarkdownIt:
    """A CommonMark parser with tables, headings carrying their anchor and a "¶" link."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def heading_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        inline = tokens[idx + 1]
        seen: dict[str, int] = env.setdefault("anchors", {})
        anchor = slugify_heading(inline.content) or "section"
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        if count:
            anchor = f"{anchor}-{count}"
        token.attrSet("id", anchor)
        env.setdefault("heading_ids", []).append(anchor)
        return self.renderToken(tokens, idx, options, env)

    def heading_close(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        anchor = env["heading_ids"][-1]
        mark = f' <a class="anchor" href="#{anchor}" aria-label="Link to this section">¶</a>'
        return mark + self.renderToken(tokens, idx, options, env)

    md.add_render_rule("heading_open", heading_open)
    md.add_render_rule("heading_close", heading_close)
    return md


_LINK = re.compile(r'<a href="([^"]*)">(.*?)</a>', re.S)
#: A mention of a ``docs/`` file, in a code span or not, with an optional anchor or the
#: quoted heading that follows it (``docs/metrics.md, "Ranks and ties"``).
_MENTION = re.compile(
    r"(?:<code>)?docs/([\w.-]+\.md)(#[\w-]+)?(?:</code>)?"
    r"(?P<heading>,? (?:&quot;|“)(?P<text>[^&”<]+)(?:&quot;|”))?"
)


def _rewrite_link(match: re.Match[str]) -> str:
    """One ``<a>`` of the rendered Markdown, pointed at the site or unwrapped."""
    href, label = html.unescape(match.group(1)), match.group(2)
    if re.match(r"^(https?:|mailto:|#)", href):
        return match.group(0)
    path, _, anchor = href.partition("#")
    doc = _doc_for_path(path) if path.endswith(".md") else None
    if doc is None:
        return f'<span class="repo-file">{label}</span>'
    if re.fullmatch(r"(?:<code>)?[\w./-]+\.md(?:</code>)?", label):
        label = html.escape(doc.title)
    url = html.escape(method_url(doc.slug, anchor))
    return f'<a href="{url}">{label}</a>'


def _rewrite_mention(match: re.Match[str]) -> str:
    """One plain mention of a ``docs/`` file, as a link to its page or as the note's name."""
    filename, anchor, heading = match.group(1), match.group(2), match.group("text")
    doc = _BY_FILE.get(filename)
    if doc is None:
        name = html.escape(_note_title(filename))
        tail = match.group("heading") or ""
        return f"the notes “{name}” (in the repository){tail}"
    target = heading or (anchor or "")[1:]
    url = html.escape(method_url(doc.slug, target))
    words = html.escape(doc.title) + (f", “{html.escape(heading)}”" if heading else "")
    return f'<a href="{url}">{words}</a>'


def _rewrite(rendered: str) -> str:
    """Rewrite what the rendered HTML points into the repository (module docstring)."""
    # Mentions inside link labels are handled by the link rule; mentions in text first.
    parts = _LINK.split(rendered)
    out: list[str] = []
    for i in range(0, len(parts), 3):
        out.append(_MENTION.sub(_rewrite_mention, parts[i]))
        if i + 2 < len(parts):
            anchor = f'<a href="{parts[i + 1]}">{parts[i + 2]}</a>'
            out.append(_LINK.sub(_rewrite_link, anchor))
    return "".join(out)


@dataclass(frozen=True)
class RenderedDoc:
    """A method page's content: its HTML and the anchors of its headings (level, id, text)."""

    html: str
    headings: tuple[tuple[int, str, str], ...]


@lru_cache(maxsize=32)
def _render_cached(slug: str, mtime_ns: int) -> RenderedDoc:
    doc = _BY_SLUG[slug]
    text = (docs_dir() / doc.filename).read_text(encoding="utf-8")
    text = re.sub(r"\A# [^\n]*\n", "", _select_sections(text, doc))  # the page has its title
    md = _markdown()
    env: dict[str, object] = {}
    tokens = md.parse(text, env)
    headings: list[tuple[int, str, str]] = []
    body = md.renderer.render(tokens, md.options, env)
    ids = env.get("heading_ids", [])
    assert isinstance(ids, list)
    inline_of = [tokens[i + 1] for i, t in enumerate(tokens) if t.type == "heading_open"]
    levels = [int(t.tag[1]) for t in tokens if t.type == "heading_open"]
    for level, anchor, inline in zip(levels, ids, inline_of, strict=True):
        headings.append((level, str(anchor), inline.content.replace("`", "")))
    # a code block can scroll sideways: focusable, so the keyboard can scroll it too
    body = body.replace("<pre>", '<pre tabindex="0">')
    body = body.replace(
        "<table>", '<div class="table-scroll" role="region" aria-label="Table" tabindex="0"><table>'
    ).replace("</table>", "</table></div>")
    return RenderedDoc(html=_rewrite(body), headings=tuple(headings))


def render_doc(doc: MethodDoc) -> RenderedDoc:
    """The page content of ``doc`` (cached until its file changes)."""
    path = docs_dir() / doc.filename
    return _render_cached(doc.slug, path.stat().st_mtime_ns)
