"""Command allow-list of the route app: a table of tool grammars and one checker.

What it guarantees. An agent command runs only when every word of it is accounted for by
the row of its tool in :data:`apps.route.allowlist_specs.TOOLS`, read as the tool itself
reads it, so what is checked is what the tool will do. Nothing it lets through reads or
writes a file, enters another namespace, runs a program or never ends; and nothing writes
state that a reused network would not get back: every write the grammars allow
(:func:`write_surface`) is listed in :data:`WRITABLE_STATE` with the kinds of state it
writes, each of which the network pool restores and verifies before the network is leased
again (``apps.route.pool.POOL_COVERAGE``) and the step fingerprint shows
(``apps.route.network.FINGERPRINT_READS``); ``tests/apps/route/test_state_coverage.py``
holds the three together. What cannot be given back is refused (an IPv6
``stable_secret``, ``ip addrlabel``, ``ip nexthop``, MPLS, ``tc filter add``, ...).

How the tools read their arguments (the row's ``style``):

* ``iproute`` (``ip``, ``tc``, iproute2 6.1): global options one word at a time; a word that
  is a *prefix* of an option name selects that option (``ip -ba`` is ``-batch``, ``ip --bat``
  too, because a leading ``--`` is read as ``-``). Only the spellings in the row are
  accepted, written in full. Objects (``ip a``, ``ip r``, ``tc q``) are resolved by prefix in
  iproute2's own table order (``ip n`` is ``neighbor``, ``ip net`` is ``netns``) and then
  checked against the row; sub-commands (``show``, ``add``, ...) must be written in full;
  keywords of the row (``netns``, ``exec``, ``bpf``, ...) are refused after the object,
  abbreviated too.
* ``getopt`` (``ss``, ``arp``, ``netstat``, ``route``, ``iptables``, ``iptables-save``,
  ``sysctl``, ``cat``: glibc ``getopt_long``): a word ``-abc`` is the short options
  ``-a -b -c`` (an option that takes an argument takes the rest of the word or the next
  word: ``arp -vf FILE`` is ``-v -f FILE``), and a long option may be abbreviated
  (``arp --fil``, ``iptables --modp``). Clusters are parsed exactly so; every letter must be
  an allowed option and every argument of its kind. Long options must be written in full.
* ``words`` (``ifconfig``): leading options as whole words, then operands.

Refused everywhere: control characters (NUL, escape, ...), shell syntax (no shell ever runs
the command; it is split with :func:`shlex.split`), ``--``, words that name files (starting
with ``/``, ``.`` or ``~``; except ``cat``'s paths under ``/proc/net`` and ``/proc/sys/net``).

How to add a command: add or change a row of :data:`apps.route.allowlist_specs.TOOLS` (an
option with :func:`~apps.route.allowlist_grammar.opt`, a sub-command in an object's
``verbs``, a new tool as a :class:`~apps.route.allowlist_grammar.CommandSpec`), never code
here. A row that now writes something new needs its :class:`~apps.route.allowlist_grammar.Write`
(or an object's ``writes``) naming the kinds of state, and those kinds the pool's restore
and the step fingerprint; ``test_state_coverage`` fails until they do. Pin the new
spellings in ``tests/apps/route/test_allowlist.py``; a command of the pinned corpus whose
verdict changes fails ``tests/apps/route/test_allowlist_corpus.py`` until its data file says so.

Sources: the iproute2 6.1 ``ip(8)``, ``tc(8)``, ``ss(8)`` manuals and their ``matches()``
prefix rule; net-tools 2.10 ``arp(8)``, ``route(8)``, ``netstat(8)``, ``ifconfig(8)``;
iptables 1.8.9 ``iptables(8)``, ``iptables-save(8)``; procps-ng 4 ``sysctl(8)``; glibc
``getopt_long(3)``.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apps.route.allowlist_grammar import CommandSpec, OneOf, Option, Write
from apps.route.allowlist_specs import (
    ALLOWED_TOOLS,
    IP_FAMILIES,
    IPTABLES_TABLES,
    READ_ONLY_VERBS,
    STATE_KINDS,
    TOOLS,
    WRITABLE_STATE,
)

__all__ = [
    "ALLOWED_TOOLS", "COMMAND_MAX_CHARS", "IPTABLES_TABLES", "IP_FAMILIES", "READ_ONLY_VERBS",
    "STATE_KINDS", "WRITABLE_STATE", "CommandRefusedError", "check_command", "write_surface",
]  # fmt: skip

#: Longest accepted command (characters).
COMMAND_MAX_CHARS = 1_000
#: Shell metacharacters: a shell never sees the command, so these would only mislead.
_SHELL_CHARS = re.compile(r"[;&|<>`$\n\r\\]")


class CommandRefusedError(Exception):
    """A command the allow-list refuses; ``str(exc)`` is the observation shown to the agent."""


# --- options -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _OptionIndex:
    """A row's options by spelling: ``allowed`` and ``refused`` (-> reason) spellings, and
    ``known``, every spelling in table order (to name what an abbreviation would mean)."""

    allowed: Mapping[str, Option]
    refused: Mapping[str, str]
    known: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def _index(options: tuple[Option, ...]) -> _OptionIndex:
    allowed: dict[str, Option] = {}
    refused: dict[str, str] = {}
    for option in options:
        for name in option.names:
            if option.refused:
                refused[name] = option.refused
            elif option.allowed:
                allowed[name] = option
    known = tuple(name for option in options for name in option.names)
    return _OptionIndex(allowed, refused, known)


def _first_prefix_match(word: str, table: Sequence[str]) -> str | None:
    """iproute2's ``matches()`` lookup: the first entry of ``table`` that ``word`` begins."""
    for entry in table:
        if word and entry.startswith(word):
            return entry
    return None


def _leading_options(spec: CommandSpec, args: list[str]) -> int:
    """Check the whole-word options that lead ``args`` (``iproute`` and ``words`` styles);
    return the index of the first word that is not an option.

    Raises:
        CommandRefusedError: ``--``, a refused, unknown or abbreviated option, or a missing or
            refused option argument.
    """
    tool, index = spec.tool, _index(spec.options)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        i += 1
        opt = word
        if spec.style == "iproute":
            if word == "--":
                raise CommandRefusedError(f"{tool}: '--' is not allowed here")
            opt = word[1:] if word.startswith("--") else word
        if opt in index.refused:
            raise CommandRefusedError(f"{tool} {opt} is not allowed here ({index.refused[opt]})")
        option = index.allowed.get(opt)
        if option is None:
            meant = _first_prefix_match(opt, index.known) if spec.style == "iproute" else None
            hint = f" ({tool} would read it as {meant})" if meant and meant != opt else ""
            raise CommandRefusedError(
                f"{tool} {word} is not allowed here: options must be one of "
                f"{', '.join(index.allowed)}, written in full{hint}"
            )
        if option.value is not None:
            if i >= len(args) or not option.value.accepts(args[i]):
                raise CommandRefusedError(f"{tool} {word} needs one of {option.value.describe()}")
            i += 1
    return i


def _parse_getopt(spec: CommandSpec, args: list[str]) -> tuple[list[str], bool]:
    """Parse ``args`` as glibc ``getopt_long`` (with permutation) does; return the operands
    and whether an option that writes (:attr:`Option.writes`) was given.

    Raises:
        CommandRefusedError: an option that is unknown, refused, abbreviated, or has a bad argument.
    """
    tool, index = spec.tool, _index(spec.options)
    operands: list[str] = []
    writes = False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            raise CommandRefusedError(f"{tool}: '--' is not allowed here")
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name in index.refused:
                raise CommandRefusedError(
                    f"{tool} --{name} is not allowed here ({index.refused[name]})"
                )
            option = index.allowed.get(name) if len(name) > 1 else None
            if option is None:
                meant = [n for n in index.known if name and len(n) > 1 and n.startswith(name)]
                if meant:
                    raise CommandRefusedError(
                        f"{tool} --{name} is not allowed here: abbreviated options are refused "
                        f"(the tool would read it as --{meant[0]}); write allowed options in full"
                    )
                raise CommandRefusedError(f"{tool} --{name} is not an allowed option")
            writes |= option.writes
            if option.value is None:
                if eq:
                    raise CommandRefusedError(f"{tool} --{name} takes no value")
                continue
            if not eq:
                if i >= len(args):
                    raise CommandRefusedError(f"{tool} --{name} needs a value")
                value = args[i]
                i += 1
            if not option.value.accepts(value):
                raise CommandRefusedError(f"{tool} --{name}: value {value!r} is not allowed here")
            continue
        if word.startswith("-") and len(word) > 1:
            j = 1
            while j < len(word):
                letter = word[j]
                j += 1
                if letter in index.refused:
                    combined = f" (in {word!r})" if len(word) > 2 else ""
                    raise CommandRefusedError(
                        f"{tool} -{letter} is not allowed here{combined}: {index.refused[letter]}"
                    )
                option = index.allowed.get(letter)
                if option is None:
                    raise CommandRefusedError(
                        f"{tool} -{letter} is not an allowed option (in {word!r})"
                    )
                writes |= option.writes
                if option.value is None:
                    continue
                value = word[j:]
                j = len(word)
                if not value:
                    if i >= len(args):
                        raise CommandRefusedError(f"{tool} -{letter} needs a value")
                    value = args[i]
                    i += 1
                if not option.value.accepts(value):
                    raise CommandRefusedError(
                        f"{tool} -{letter}: value {value!r} is not allowed here"
                    )
            continue
        operands.append(word)
    return operands, writes


# --- objects and operands --------------------------------------------------------------------
def _refuse_keywords(tool: str, words: Sequence[str], keywords: Mapping[str, str]) -> None:
    """Refuse any word that is a keyword of ``keywords`` or an abbreviation (>= 3 chars) of one.

    iproute2 reads many keywords with ``matches()``, so ``obj`` and ``objec`` both mean
    ``object``; refusing abbreviations too closes that door. Keywords containing a dash
    (``link-netns``) are matched exactly, so that ``scope link`` stays usable.
    """
    for word in words:
        for keyword, why in keywords.items():
            abbreviation = "-" not in keyword and len(word) >= 3 and keyword.startswith(word)
            if word == keyword or abbreviation:
                raise CommandRefusedError(f"{tool} {keyword} is not allowed here ({why})")


def _check_object(spec: CommandSpec, args: list[str]) -> None:
    """Check ``object [sub-command [operand ...]]`` of an ``iproute`` tool against its row.

    Raises:
        CommandRefusedError: a missing, unknown or refused object, a sub-command that is not
            allowed, a refused keyword, an option after the object or a bad operand.
    """
    tool = spec.tool
    if not args:
        raise CommandRefusedError(f"{tool} needs an object, e.g. {spec.example}")
    objects = {obj.name: obj for obj in spec.objects}
    name = _first_prefix_match(args[0], list(objects))
    if name is None:
        raise CommandRefusedError(f"{tool}: unknown object {args[0]!r}")
    obj = objects[objects[name].alias_of or name]
    if obj.refused:
        raise CommandRefusedError(f"{tool} {obj.name} is not allowed here ({obj.refused})")
    if not obj.verbs:
        allowed = ", ".join(sorted(o.name for o in spec.objects if o.verbs))
        raise CommandRefusedError(
            f"{tool} {obj.name} is not allowed here; allowed objects: {allowed}"
        )
    rest = args[1:]
    if rest:
        verb = rest[0]
        if verb.startswith("-"):
            raise CommandRefusedError(
                f"{tool} {obj.name}: options go before the object ({tool} -s {obj.name} show)"
            )
        if verb != "help" and verb not in obj.verbs:
            raise CommandRefusedError(
                f"{tool} {obj.name} {verb} is not allowed here: sub-commands must be written in "
                f"full, one of {', '.join(sorted(obj.verbs))}"
            )
    _refuse_keywords(tool, rest, spec.keywords)
    label, kind = f"{tool} {obj.name}", spec.operands.kind
    for word in rest[1:]:
        if word.startswith("-") and len(word) > 1:
            raise CommandRefusedError(f"{label}: option {word!r} is not allowed after the object")
        if kind is None or not kind.accepts(word):
            raise CommandRefusedError(
                kind.refusal(label, word) if kind else f"{label} takes no operands"
            )


def _check_operands(spec: CommandSpec, operands: list[str], raw: list[str], writes: bool) -> None:
    """Check the operands against the row: ``operands`` as getopt left them, then ``raw``,
    words the tool may read as options (a word with a leading ``-`` must be one of the row's
    ``words``); ``writes``: the command writes each operand (``sysctl -w``).

    Raises:
        CommandRefusedError: a missing, unexpected or refused operand.
    """
    tool, rule = spec.tool, spec.operands
    if rule.kind is None and (operands or raw):
        raise CommandRefusedError(f"{tool} takes no operands")
    if rule.required and not operands and not raw:
        raise CommandRefusedError(rule.required)
    dashed = ", ".join(sorted(w for w in rule.words if w.startswith("-")))
    dashed = f" (of the words with a dash, only {dashed})" if dashed else ""
    for position, word in enumerate((*operands, *raw)):
        if word in rule.words:
            continue
        if position >= len(operands) and word.startswith("-"):
            raise CommandRefusedError(f"{tool} {word} is not allowed here{dashed}")
        if rule.kind is not None and not rule.kind.accepts(word):
            raise CommandRefusedError(rule.kind.refusal(tool, word))
    for word in (*operands, *raw):
        why = rule.kind.write_refusal(tool, word, writes) if rule.kind else None
        if why:
            raise CommandRefusedError(why)


def _check_args(spec: CommandSpec, args: list[str]) -> None:
    """Walk ``args`` (the words after the tool's name) against the tool's row.

    Raises:
        CommandRefusedError: the first word the row does not account for.
    """
    if spec.style == "iproute":
        _check_object(spec, args[_leading_options(spec, args) :])
        return
    if spec.style == "words":
        _check_operands(spec, [], args[_leading_options(spec, args) :], writes=False)
        return
    head, tail = args, []
    for position, word in enumerate(args):
        if word in spec.operands.options_end:
            head, tail = args[:position], args[position + 1 :]
            break
    try:
        operands, writes = _parse_getopt(spec, head)
    except CommandRefusedError as exc:
        if spec.option_hint:
            raise CommandRefusedError(f"{exc}; {spec.option_hint}") from None
        raise
    _check_operands(spec, operands, tail, writes)


# --- what the grammars let a command change ----------------------------------------------------
def _candidates(spec: CommandSpec, write: Write) -> tuple[str, ...]:
    """The values ``write_surface`` tries ``write.probe`` with (see :class:`Write`)."""
    if write.candidates_of:
        option = _index(spec.options).allowed[write.candidates_of]
        values = option.value.values if isinstance(option.value, OneOf) else ()
        return tuple(value for value in values if value not in write.skip)
    return write.candidates or ("",)


def write_surface() -> frozenset[str]:
    """Every way the current grammars let a command change a node, derived from them (not
    from :data:`WRITABLE_STATE`, which must list exactly these).

    ``ip``/``tc`` objects with a sub-command beyond :data:`READ_ONLY_VERBS`; each
    :class:`~apps.route.allowlist_grammar.Write` label whose probe command passes, for every
    candidate value (every ``ip -f`` family but ``inet``/``inet6``, every iptables table,
    every sysctl tree); and any allowed tool not declared read-only that none of these
    covers, by its name.
    """
    surface: set[str] = set()
    for spec in TOOLS.values():
        surface |= {f"{spec.tool} {o.name}" for o in spec.objects if o.verbs - READ_ONLY_VERBS}
        for write in spec.writes:
            for value in _candidates(spec, write):
                if check_command(write.probe.format(value))[0] is not None:
                    surface.add(write.label.format(value))
    covered = {label.split()[0] for label in surface}
    surface |= {tool for tool, spec in TOOLS.items() if not spec.read_only and tool not in covered}
    return frozenset(surface)


# --- entry point -----------------------------------------------------------------------------
def check_command(command: str) -> tuple[list[str] | None, str | None]:
    """Split ``command`` and check it against its tool's row of the table.

    Never raises: returns ``(argv, None)`` when allowed, ``(None, reason)`` when refused (the
    reason is the observation shown to the agent).
    """
    try:
        return _check(command), None
    except CommandRefusedError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - agent text must never crash an episode
        return None, f"command could not be checked ({type(exc).__name__})"


def _check(command: str) -> list[str]:
    if not isinstance(command, str):
        raise CommandRefusedError("the command must be a string")
    if len(command) > COMMAND_MAX_CHARS:
        raise CommandRefusedError(f"command longer than {COMMAND_MAX_CHARS} characters")
    if _SHELL_CHARS.search(command) or "$(" in command:
        raise CommandRefusedError(
            "shell syntax is not available (no ; && || | $( ) ` < > or backslashes): "
            "send exactly one command per step"
        )
    if any(not ch.isprintable() for ch in command):
        raise CommandRefusedError(
            "control characters (NUL, escape, tab, ...) are not allowed in commands"
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandRefusedError(f"cannot split the command: {exc}") from None
    if not argv:
        raise CommandRefusedError("empty command")
    tool, args = argv[0], argv[1:]
    if tool == "sudo":
        raise CommandRefusedError("no sudo: commands already run with the privileges they need")
    if tool in ("ping", "ping6", "fping", "arping", "traceroute"):
        raise CommandRefusedError("no ping: the pingall result is provided after every step")
    spec = TOOLS.get(tool)
    if spec is None:
        raise CommandRefusedError(f"{tool!r} is not an allowed tool; allowed: {', '.join(TOOLS)}")
    _check_args(spec, args)
    return argv
