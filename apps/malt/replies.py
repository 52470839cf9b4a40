"""Extract the agent's Python code from its reply text.

Rules, in order (documented in docs/malt.md):

1. Fenced blocks (```` ```python ````, ```` ```py ````, or untagged; an unterminated last fence
   runs to the end) are preferred. Blocks tagged with another language are ignored.
2. The last block defining ``process_graph`` at top level is the main block. Earlier python
   blocks that only hold imports, definitions and assignments are kept before it (helpers the
   agent wrote in separate blocks); helpers inside the main block are kept as they are.
3. Without usable fences, the reply itself is the code: leading prose is skipped up to the
   first line that starts Python code, trailing prose is cut until the code parses (each
   attempt cuts at the line the parser stopped at; at most :data:`MAX_PARSE_ATTEMPTS`
   attempts, so a long unfenced reply costs a bounded number of parses).
4. Top-level statements that call ``process_graph`` (example usage) and
   ``if __name__ == "__main__":`` blocks are dropped: the evaluator makes the call itself.

The extractor never executes anything and never raises for the reply's content; a reply
without code gives ``code=None`` and a reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from evaluator.deadline import Deadline

#: Replies longer than this are not parsed (characters); the sandbox caps output anyway.
MAX_REPLY_CHARS = 262_144
#: At most this many parses are tried while cutting trailing prose off bare code
#: (one 256 KiB unfenced reply cost 93 s in up to 400 parses before this bound).
MAX_PARSE_ATTEMPTS = 12

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+.-]*)[^\n]*$")
_PY_TAGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^(def |async def |import |from \S+ import |class |@|[A-Za-z_]\w* *=)")


@dataclass(frozen=True)
class Extraction:
    """Result of :func:`extract_code`: the code (or ``None``), how it was found, and why not."""

    code: str | None
    method: str
    reason: str = ""


def _blocks(text: str) -> list[tuple[str, str]]:
    """Return ``(language tag, body)`` for every fenced block."""
    blocks: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, tag = match.group(1), match.group(2).lower()
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
            body.append(lines[i])
            i += 1
        blocks.append((tag, "\n".join(body)))
        i += 1
    return blocks


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _defines_entry(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "process_graph"
        for node in tree.body
    )


def _calls_entry(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Name)
        and sub.func.id == "process_graph"
        for sub in ast.walk(node)
    )


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _helper_only(tree: ast.Module) -> bool:
    allowed = (
        ast.Import,
        ast.ImportFrom,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Assign,
        ast.AnnAssign,
    )
    return all(isinstance(n, allowed) and not _calls_entry(n) for n in tree.body)


def _drop_usage(code: str) -> str:
    """Remove top-level calls of process_graph and ``__main__`` blocks (by line ranges)."""
    tree = _parse(code)
    if tree is None:
        return code.rstrip()
    lines = code.split("\n")
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if _is_main_guard(node) or _calls_entry(node):
            end = node.end_lineno or node.lineno
            drop.update(range(node.lineno - 1, end))
    if not drop:
        return code.rstrip()
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).rstrip()


def _error_line(code: str) -> int | None:
    """1-based line where parsing ``code`` fails, ``None`` when it parses."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return exc.lineno or len(code.split("\n"))
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return len(code.split("\n"))
    return None


def _bare_code(text: str, deadline: Deadline | None = None) -> str | None:
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    lines = lines[start:]
    for _ in range(MAX_PARSE_ATTEMPTS):
        if deadline is not None:
            deadline.check()
        error_line = _error_line("\n".join(lines))
        if error_line is None:
            return "\n".join(lines)
        # keep the lines before the one the parser stopped at (at least one line fewer)
        lines = lines[: max(0, min(len(lines) - 1, error_line - 1))]
        if not lines:
            break
    return "\n".join(text.split("\n")[start:])  # unparseable: the sandbox reports the error


def extract_code(reply: object, deadline: Deadline | None = None) -> Extraction:
    """Return the code to run for ``reply`` (see the module docstring for the rules).

    Raises ``evaluator.deadline.JudgeBudgetExceeded`` once ``deadline`` has passed.
    """
    if not isinstance(reply, str) or not reply.strip():
        return Extraction(None, "none", "the reply is empty")
    if len(reply) > MAX_REPLY_CHARS:
        return Extraction(None, "none", f"the reply is longer than {MAX_REPLY_CHARS} characters")
    text = reply.replace("\r\n", "\n")
    python_blocks = [body for tag, body in _blocks(text) if tag in _PY_TAGS and body.strip()]
    if python_blocks:
        parsed = [_parse(body) for body in python_blocks]
        mains = [i for i, tree in enumerate(parsed) if tree is not None and _defines_entry(tree)]
        if mains:
            main = mains[-1]
            helpers = [
                python_blocks[i]
                for i in range(main)
                if (tree := parsed[i]) is not None
                and _helper_only(tree)
                and not _defines_entry(tree)
            ]
            code = "\n\n".join([*helpers, python_blocks[main]])
            return Extraction(_drop_usage(code), "fenced")
        textual = [b for b in python_blocks if "def process_graph" in b]
        chosen = textual[-1] if textual else "\n\n".join(python_blocks)
        return Extraction(_drop_usage(chosen), "fenced")
    bare = _bare_code(text, deadline)
    if bare is None:
        return Extraction(None, "none", "no Python code found in the reply")
    return Extraction(_drop_usage(bare), "bare")


def code_problem(reply: object) -> str | None:
    """Why ``reply`` holds no code the evaluator would run as ``process_graph``, or ``None``.

    The reply passes when :func:`extract_code` finds code that parses and defines
    ``process_graph`` at top level; nothing is executed and nothing raises.
    """
    extraction = extract_code(reply)
    if extraction.code is None:
        return extraction.reason
    tree = _parse(extraction.code)
    if tree is None:
        line = _error_line(extraction.code)
        return f"the code does not parse (line {line})" if line else "the code does not parse"
    if not _defines_entry(tree):
        return "the code defines no top-level function process_graph"
    return None
