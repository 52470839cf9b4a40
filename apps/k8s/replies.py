"""Parsing agent replies of the ``k8s`` app: one ``kubectl`` command per reply.

Accepted shapes (the first fenced block is used when the reply has one, else the whole text):

* ``kubectl get networkpolicies -o yaml`` -- one line, split like a POSIX shell would split
  it (quotes and backslashes; :func:`shlex.split`), but never run by a shell;
* ``kubectl apply -f - <<EOF`` followed by a manifest and a line ``EOF`` -- the here-document
  becomes the command's standard input (``<<'EOF'``, ``<<"EOF"`` and ``<<-EOF`` too; any
  delimiter word);
* ``cat <<EOF | kubectl apply -f -`` with the same here-document -- the same thing;
* ``done`` -- the agent ends the episode;
* ``healthy`` -- the agent ends the episode and declares that nothing was misconfigured (the
  answer a healthy control expects).

Anything else (pipes, ``;``, ``&&``, redirections, command substitution, several commands) is
refused with a reason the agent sees as its observation.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from evaluator.multistep import fenced_body

#: Reply that ends the episode.
DONE_WORD = "done"
#: Reply that ends the episode declaring the policies healthy (nothing to fix).
HEALTHY_WORD = "healthy"

_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_SHELL_META = ("|", ";", "&", ">", "<", "`", "$(", "\n")


@dataclass(frozen=True)
class ParsedReply:
    """One parsed reply.

    Attributes:
        done: the agent ends the episode.
        healthy: with ``done``, the agent declared the policies healthy.
        argv: the command as an argument vector (``argv[0] == "kubectl"``), or None.
        stdin: here-document text for the command's standard input, or None.
        error: why the reply cannot be run (shown to the agent), or None.
        text: the command line as the agent wrote it (for transcripts).
    """

    done: bool = False
    healthy: bool = False
    argv: tuple[str, ...] | None = None
    stdin: str | None = None
    error: str | None = None
    text: str = ""


def parse_reply(reply: object) -> ParsedReply:
    """Parse one agent reply (see the module docstring). Never raises."""
    if not isinstance(reply, str) or not reply.strip():
        return ParsedReply(error="empty reply: send one kubectl command, or done")
    body = fenced_body(reply).strip("\n")
    lines = body.split("\n")
    # drop blank lines and whole-line comments before the command
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        lines.pop(0)
    if not lines:
        return ParsedReply(error="no command found in the reply")
    first = lines[0].strip()
    if first.startswith("$ "):
        first = first[2:].strip()
    word = first.lower().rstrip(".")
    if word in (DONE_WORD, HEALTHY_WORD) and not any(ln.strip() for ln in lines[1:]):
        return ParsedReply(done=True, healthy=word == HEALTHY_WORD, text=first)
    stdin = None
    rest = lines[1:]
    heredoc = _HEREDOC.search(first)
    if heredoc:
        strip_tabs, word = heredoc.group(1) == "-", heredoc.group(3)
        doc: list[str] = []
        for i, line in enumerate(rest):
            candidate = line.lstrip("\t") if strip_tabs else line
            if candidate.strip() == word:
                rest = rest[i + 1 :]
                break
            doc.append(candidate)
        else:
            return ParsedReply(
                error=f"here-document not closed: no line {word!r} after the manifest", text=first
            )
        stdin = "\n".join(doc) + "\n"
        first = (first[: heredoc.start()] + first[heredoc.end() :]).strip()
        pipe = re.fullmatch(r"cat\s*\|\s*(.+)", first)
        if pipe:
            first = pipe.group(1).strip()
    if any(ln.strip() and not ln.lstrip().startswith("#") for ln in rest):
        return ParsedReply(
            error="one command per reply: everything after the first command was not run "
            "(nothing was run)",
            text=first,
        )
    for meta in _SHELL_META:
        if meta in first:
            return ParsedReply(
                error=f"shell syntax {meta!r} is not supported: commands run without a shell; "
                "send one kubectl command (a here-document for apply -f - is allowed)",
                text=first,
            )
    try:
        argv = tuple(shlex.split(first))
    except ValueError as exc:
        return ParsedReply(error=f"cannot split the command: {exc}", text=first)
    if not argv:
        return ParsedReply(error="no command found in the reply", text=first)
    if argv[0] != "kubectl":
        return ParsedReply(
            error=f"only kubectl commands are run here, not {argv[0]!r}", text=first
        )
    return ParsedReply(argv=argv, stdin=stdin, text=first)
