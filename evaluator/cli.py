"""Command-line evaluation of one agent endpoint (``manage.py evaluate`` / ``python -m evaluator``).

Teams use it offline against their own agent; the site runs the same engine through Celery.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from evaluator.agents import LOOPBACK_NETWORKS, PROTOCOLS, make_client
from evaluator.evaluation import evaluate_agent
from evaluator.oracle_vault import OracleVault
from evaluator.prompting import DEFAULT_PROMPT_TYPE, PROMPT_TYPES
from evaluator.registry import app_ids
from evaluator.report import format_summary_table, write_result_file
from evaluator.types import EpisodeResult, new_seed
from evaluator.variants import VariantPack, VariantPackError, discover_packs, register_pack


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``evaluate`` options to ``parser`` (shared by the Django command)."""
    parser.add_argument("--agent-url", required=True, help="agent endpoint base URL")
    parser.add_argument("--protocol", required=True, choices=PROTOCOLS)
    parser.add_argument(
        "--apps",
        default=None,
        help="comma-separated app ids of the registry (evaluator/registry.py), now "
        + ",".join(app_ids())
        + " (default: the first one)",
    )
    parser.add_argument("--queries", type=int, default=20, help="queries per app (default 20)")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="generation seed (default: a fresh random 128-bit seed, written to the result file)",
    )
    parser.add_argument(
        "--level", type=int, choices=[1, 2, 3], default=None, help="only this level"
    )
    parser.add_argument("--json", dest="json_out", default=None, help="write the result file here")
    parser.add_argument("--model", default=None, help="model name sent to openai-chat endpoints")
    parser.add_argument(
        "--api-key-env", default=None, help="environment variable holding the API key"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=60.0, help="per-reply deadline (seconds)"
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="step budget (default: per app)"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="episodes run at once")
    parser.add_argument(
        "--trials",
        type=int,
        default=1,
        help="run every query this many times and report pass^k (default 1)",
    )
    parser.add_argument(
        "--oracle-vault",
        default=None,
        help="directory shared with a locally served oracle reference agent",
    )
    parser.add_argument(
        "--allow-network",
        action="append",
        default=None,
        help="CIDR the agent may live in (default: loopback); repeatable",
    )
    parser.add_argument(
        "--variant-pack",
        action="append",
        default=None,
        metavar="DIR",
        help="draw every query from the variant packs in DIR (a pack directory or a directory "
        "of packs, docs/writing-a-variant-pack.md); repeatable; every app of --apps needs a "
        "pack; default: the packs of NETARENA_VARIANT_DIRS mixed "
        "with the public generator",
    )
    parser.add_argument(
        "--prompt-type",
        choices=PROMPT_TYPES,
        default=DEFAULT_PROMPT_TYPE,
        help="NetArena's prompt type the tasks are sent with (default zeroshot_base: unchanged; "
        "docs/agentbeats.md); recorded with every result",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-episode lines")


def run_evaluate(options: argparse.Namespace, out: object = sys.stdout) -> int:
    """Run an evaluation from parsed options; print the summary; return an exit status.

    Exit status 0 on a completed evaluation (whatever the agent scored), 2 on bad options or an
    endpoint refused by the outbound guard.
    """
    write = out.write  # type: ignore[attr-defined]
    apps_option = options.apps if options.apps is not None else app_ids()[0]
    requested = [a.strip() for a in apps_option.split(",") if a.strip()]
    unknown = [a for a in requested if a not in app_ids()]
    if unknown or not requested:
        write(f"error: unknown app(s) {unknown}; known: {', '.join(app_ids())}\n")
        return 2
    if options.queries < 1:
        write("error: --queries must be at least 1\n")
        return 2
    if options.trials < 1:
        write("error: --trials must be at least 1\n")
        return 2
    api_key = None
    if options.api_key_env:
        api_key = os.environ.get(options.api_key_env)
    allowed = (
        options.allow_network
        if options.allow_network is not None
        else list(LOOPBACK_NETWORKS)  # the CLI runs on the user's own machine
    )
    try:
        client = make_client(
            options.protocol,
            options.agent_url,
            api_key=api_key,
            model=options.model,
            timeout_s=options.timeout_s,
            allowed_networks=allowed,
        )
    except ValueError as exc:
        write(f"error: {exc}\n")
        return 2

    def progress(result: EpisodeResult) -> None:
        if options.quiet:
            return
        mark = "ok " if result.correct else "FAIL"
        safe = "safe" if result.safe else "UNSAFE"
        write(
            f"{mark} {safe:6} {result.app_id:<5} L{result.level} {result.label:<16} "
            f"{result.query_id}{f' trial={result.trial}' if options.trials > 1 else ''} "
            f"steps={result.steps} latency={result.latency_s:.3f}s"
            f"{'' if result.failure is None else ' failure=' + result.failure}\n"
        )

    variant_packs: list[VariantPack] | None = None
    share: float | None = None
    if getattr(options, "variant_pack", None):
        try:
            found = discover_packs(options.variant_pack)
        except VariantPackError as exc:
            write(f"error: {exc}\n")
            client.close()
            return 2
        variant_packs = [p for p in found if p.app_id in requested]
        lacking = sorted(set(requested) - {p.app_id for p in variant_packs})
        if lacking:
            write(f"error: --variant-pack holds no pack for app(s) {lacking}\n")
            client.close()
            return 2
        for pack in variant_packs:
            register_pack(pack)
        share = 1.0
    vault = OracleVault(options.oracle_vault) if options.oracle_vault else None
    try:
        document = evaluate_agent(
            client,
            requested,
            queries_per_app=options.queries,
            seed=options.seed if options.seed is not None else new_seed(),
            level=options.level,
            vault=vault,
            concurrency=options.concurrency,
            max_steps=options.max_steps,
            trials=options.trials,
            on_result=progress,
            variant_packs=variant_packs,
            share=share,
            prompt_type=getattr(options, "prompt_type", DEFAULT_PROMPT_TYPE),
        )
    finally:
        client.close()
    write("\n" + format_summary_table(document["summary"]) + "\n")
    failures = document["run"]["infrastructure_failures"]
    if failures:
        write(
            f"warning: {failures} episode(s) could not be run (infrastructure) and are not scored\n"
        )
    if options.json_out:
        write_result_file(options.json_out, document)
        write(f"wrote {options.json_out}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evaluator evaluate ...``."""
    parser = argparse.ArgumentParser(prog="python -m evaluator")
    sub = parser.add_subparsers(dest="command", required=True)
    add_evaluate_arguments(sub.add_parser("evaluate", help="evaluate an agent endpoint"))
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return run_evaluate(options)
