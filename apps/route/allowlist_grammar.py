"""The vocabulary of the route allow-list's table (:mod:`apps.route.allowlist_specs`): kinds of
words (:class:`Value`) and the row types (:class:`CommandSpec` and its parts). Nothing here
names a tool; :mod:`apps.route.allowlist` walks a command against a row.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# --- value kinds -------------------------------------------------------------------------
#: A plain word: names, addresses (with /prefix), numbers, rates, MACs, ``+``.
_OPERAND = re.compile(r"^[A-Za-z0-9_.:+@/%,=!-]+$")
#: Interface names: IFNAMSIZ-1 characters the kernel accepts in practice.
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")
#: iptables chain / target names.
_CHAIN = re.compile(r"^[A-Za-z0-9_-]{1,29}$")
#: ``net.a.b`` or ``net/a/b``; segments cannot be empty or ``..`` (no way out of net.*).
SYSCTL_KEY = re.compile(r"^net(?:(?:\.[A-Za-z0-9_-]+)+|(?:/[A-Za-z0-9_-]+)+)(=[^\s=]*)?$")
_FILE_LIKE = ("/", ".", "~")


class Value:
    """A kind of word: an option's argument or an operand."""

    def accepts(self, word: str) -> bool:
        """True when ``word`` is of this kind."""
        raise NotImplementedError

    def refusal(self, tool: str, word: str) -> str:
        """The reason shown when ``word``, an operand of ``tool``, is not of this kind."""
        return f"{tool}: {word!r} is not allowed here"

    def describe(self) -> str:
        """The words of this kind, for the refusal of a missing or bad option argument."""
        return "the values it takes"

    def write_refusal(self, tool: str, word: str, writes: bool) -> str | None:
        """Why the operand ``word`` may be read but not written (``writes``: the command
        writes every operand), or None."""
        return None


@dataclass(frozen=True)
class OneOf(Value):
    """One of ``values``, written in full; ``note`` says what is left out and why."""

    values: tuple[str, ...]
    note: str = ""

    def accepts(self, word: str) -> bool:
        return word in self.values

    def describe(self) -> str:
        """The values, for a refusal: ``inet, inet6 (note)``."""
        return ", ".join(self.values) + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Matching(Value):
    """A word ``pattern`` matches."""

    pattern: re.Pattern[str]

    def accepts(self, word: str) -> bool:
        return bool(self.pattern.match(word))


@dataclass(frozen=True)
class Plain(Value):
    """A plain word (:data:`_OPERAND`) that does not look like a file name; a leading ``-``
    only with ``dash`` (an option's argument never starts with one)."""

    dash: bool = True

    def accepts(self, word: str) -> bool:
        starts = _FILE_LIKE if self.dash else (*_FILE_LIKE, "-")
        return bool(_OPERAND.match(word)) and not word.startswith(starts)

    def refusal(self, tool: str, word: str) -> str:
        if word.startswith(_FILE_LIKE):
            return f"{tool}: {word!r} looks like a file name; commands cannot use files"
        return f"{tool}: {word!r} contains characters that are not allowed here"


@dataclass(frozen=True)
class Text(Value):
    """Printable text (an iptables ``--comment``) that does not look like a file or option."""

    def accepts(self, word: str) -> bool:
        return bool(word) and word.isprintable() and not word.startswith((*_FILE_LIKE, "-"))


@dataclass(frozen=True)
class SysctlKey(Value):
    """A ``net.*`` key (:data:`SYSCTL_KEY`), ``=value`` optional; the leaves of
    ``write_refused`` may be read but never written (reason shown)."""

    pattern: re.Pattern[str]
    write_refused: Mapping[str, str] = field(default_factory=dict)

    def accepts(self, word: str) -> bool:
        return bool(self.pattern.match(word))

    def refusal(self, tool: str, word: str) -> str:
        return f"{tool}: only net.* keys are allowed (e.g. net.ipv4.ip_forward)"

    def write_refusal(self, tool: str, word: str, writes: bool) -> str | None:
        """Why ``word`` may not be written (``writes``: the command writes every key), or None."""
        name, eq, _value = word.partition("=")
        leaf = re.split(r"[./]", name)[-1]
        if leaf in self.write_refused and (writes or eq):
            return f"{tool}: writing {leaf} is not allowed here ({self.write_refused[leaf]})"
        return None


@dataclass(frozen=True)
class ProcPath(Value):
    """A file under one of ``roots`` (``/proc/net``), no ``..``, plain characters."""

    roots: tuple[str, ...]

    def accepts(self, word: str) -> bool:
        norm = posixpath.normpath(word)
        return not (
            word.startswith("-")
            or ".." in word.split("/")
            or not norm.startswith(tuple(f"{root}/" for root in self.roots))
            or not re.match(r"^[A-Za-z0-9_./:-]+$", word)
        )

    def refusal(self, tool: str, word: str) -> str:
        return f"{tool}: only files under {' and '.join(self.roots)}"


PLAIN = Plain()
PLAIN_VALUE = Plain(dash=False)
IFNAME = Matching(_IFNAME)
CHAIN = Matching(_CHAIN)


# --- row types ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option of a tool.

    Attributes:
        names: its spellings. ``getopt`` tools: letters (``"f"``) and long names without the
            dashes (``"file"``); ``iproute``/``words`` tools: whole words (``"-stats"``).
        value: the kind of its argument, None when it takes none.
        refused: why it is refused ("" when it is not).
        allowed: False for an option the tool has that is neither allowed nor refused with a
            reason: it is listed only to name what an abbreviation would mean.
        writes: the option makes the command write (``sysctl -w``).
    """

    names: tuple[str, ...]
    value: Value | None = None
    refused: str = ""
    allowed: bool = True
    writes: bool = False


def opt(*names: str, value: Value | None = None, writes: bool = False) -> Option:
    """An allowed option."""
    return Option(names, value, writes=writes)


def flags(*names: str) -> tuple[Option, ...]:
    """Allowed options without argument, one per name (``flags("n", "numeric")`` is two)."""
    return tuple(Option((name,)) for name in names)


def refuse(*names: str, why: str) -> Option:
    """An option refused with the reason ``why``."""
    return Option(names, refused=why, allowed=False)


def known(*names: str) -> tuple[Option, ...]:
    """Options the tool has that are not allowed (named in the refusal of an abbreviation)."""
    return tuple(Option((name,), allowed=False) for name in names)


@dataclass(frozen=True)
class IpObject:
    """An ``ip``/``tc`` object: ``verbs`` are its allowed sub-commands (full spellings), none
    when the object is not allowed; ``refused`` says why it never is; ``alias_of`` names the
    object it is another spelling of; ``writes`` are the kinds of state its writing verbs
    (beyond :data:`READ_ONLY_VERBS`) change."""

    name: str
    verbs: frozenset[str] = frozenset()
    refused: str = ""
    alias_of: str = ""
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Operands:
    """What may follow the options.

    Attributes:
        kind: the kind of every operand; None when the tool takes none.
        words: words accepted as they are (iptables' ``!``, route's ``-net``).
        required: the refusal when there is no operand ("" when none is needed).
        options_end: words after which nothing is read as an option (``route add``): the rest
            are operands, and one starting with ``-`` must be in ``words``.
    """

    kind: Value | None = PLAIN
    words: frozenset[str] = frozenset()
    required: str = ""
    options_end: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Write:
    """A way a tool changes a node, for :data:`WRITABLE_STATE` and ``write_surface``.

    ``label`` names it (``{}`` stands for each of ``values``), ``kinds`` are the kinds of
    state it writes (:data:`STATE_KINDS`). ``probe`` is a command that makes it (``{}`` as in
    the label); ``write_surface`` tries it with each candidate: the values of the option
    named by ``candidates_of`` (every value the grammar takes, ``skip`` left out: those the
    objects' rows cover), else ``candidates``, else the probe alone.
    """

    label: str
    kinds: tuple[str, ...]
    values: tuple[str, ...] = ("",)
    probe: str = ""
    candidates_of: str = ""
    candidates: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandSpec:
    """One row of the allow-list table: a tool and all it may be given.

    Attributes:
        tool: the program name, the command's first word.
        style: how the tool reads its options. ``iproute``: leading whole words, a leading
            ``--`` read as ``-`` (iproute2 ``ip``/``tc``), then an object of ``objects``, a
            sub-command and operands. ``getopt``: glibc ``getopt_long`` with permutation
            (clusters ``-abc``, an argument in the rest of the word or the next word, long
            options as ``--name[=value]``). ``words``: leading whole words (ifconfig).
        options: every option that matters, in the tool's table order.
        operands: what may follow the options.
        objects: ``iproute``: the tool's objects in its lookup order.
        keywords: ``iproute``: words refused anywhere after the object, with the reason
            (abbreviations of three letters or more too, except for dashed keywords).
        example: ``iproute``: a command shown when the object is missing.
        option_hint: added to the refusal of an option.
        writes: the ways the tool changes a node.
        read_only: the tool changes nothing (the options that would are refused).
    """

    tool: str
    style: str
    options: tuple[Option, ...] = ()
    operands: Operands = Operands()
    objects: tuple[IpObject, ...] = ()
    keywords: Mapping[str, str] = field(default_factory=dict)
    example: str = ""
    option_hint: str = ""
    writes: tuple[Write, ...] = ()
    read_only: bool = False
