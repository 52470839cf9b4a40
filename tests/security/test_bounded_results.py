"""Bounded results (and the JSON depth limit): results from agent code are size-checked
before they are decoded, non-finite numbers never reach storage, details and transcripts are
clipped to documented sizes. Real sandbox runs; the memory figure is measured in a fresh
interpreter so that earlier tests cannot hide a peak.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evaluator.clip import DETAILS_MAX_BYTES, INFO_MAX_BYTES, clip_json
from evaluator.runner import TRANSCRIPT_ENTRY_MAX_CHARS, TRANSCRIPT_MAX_CHARS, run_episode
from evaluator.sandbox import SandboxLimits, run_function
from evaluator.testing import ScriptedClient
from tests.conftest import require_root, require_tool
from tests.security.hostile_app import HostileApp

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(wall_timeout_s=20.0, cpu_time_s=20.0)


@pytest.fixture()
def sandbox() -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")


@pytest.mark.usefixtures("sandbox")
def test_64_mib_of_empty_dicts_is_refused_without_growing_the_evaluator() -> None:
    # Before: a 64 MiB result of empty dicts grew the evaluator from 39 MB to 1.7 GB.
    script = textwrap.dedent(
        r"""
        import json, resource, sys
        from evaluator.sandbox import SandboxLimits, run_function
        # The agent writes the terminal line itself (it shares the harness's process):
        # 64 MiB of JSON holding 22 million empty dicts.
        code = (
            "import os, sys\n"
            "def f(x):\n"
            "    body = b','.join([b'{}'] * (22 * 1024 * 1024))\n"
            "    line = b'{\"kind\":\"result\",\"value\":[' + body + b'],\"call_s\":0}\\n'\n"
            "    view = memoryview(line)\n"
            "    while view:\n"
            "        view = view[os.write(int(sys.argv[1]), view):]\n"
            "    os._exit(0)\n"
        )
        limits = SandboxLimits(wall_timeout_s=60, cpu_time_s=60, memory_bytes=4 * 1024**3,
                               result_bytes=80 * 1024**2)
        result = run_function(code, "f", None, limits=limits)
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"failure": result.failure, "error": result.error, "peak_mib": peak_mib}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failure"] == "result_too_large", report
    assert "items" in report["error"]
    # 64 MiB of text read, never decoded into objects: decoding the 22 million dicts costs
    # about 1.7 GB. The parent's peak is ~153 MiB when this test runs alone
    # and was seen at 522-563 MiB late in the whole suite (cause not found), so the bound sits
    # between that and the decoded size.
    assert report["peak_mib"] < 1024, report


@pytest.mark.usefixtures("sandbox")
def test_result_over_the_byte_limit_is_cut_off_while_reading() -> None:
    code = "def f(x):\n    return 'a' * (20 * 1024 * 1024)\n"
    result = run_function(code, "f", None, limits=LIMITS)  # default result_bytes: 16 MiB
    assert result.failure == "result_too_large"


@pytest.mark.usefixtures("sandbox")
def test_600_deep_result_is_refused_before_decoding() -> None:
    code = (
        "def f(x):\n"
        "    value = 'leaf'\n"
        "    for _ in range(600):\n"
        "        value = [value]\n"
        "    return {'answer': value}\n"
    )
    result = run_function(code, "f", None, limits=LIMITS)
    assert result.failure == "bad_result" and "deeper than" in (result.error or ""), result


@pytest.mark.usefixtures("sandbox")
@pytest.mark.parametrize("number", ["float('nan')", "float('inf')", "-float('inf')"])
def test_non_finite_results_are_refused(number: str) -> None:
    result = run_function(f"def f(x):\n    return {{'answer': {number}}}\n", "f", None)
    assert result.failure == "bad_result" and "JSON" in (result.error or ""), result


@pytest.mark.usefixtures("sandbox")
def test_non_finite_numbers_forged_on_the_result_channel_are_refused() -> None:
    # Agent code shares the harness's process: it can write the terminal line itself.
    code = (
        "import os, sys\n"
        "def f(x):\n"
        "    fd = int(sys.argv[1])\n"
        '    os.write(fd, b\'{"kind":"result","value":NaN,"call_s":0}\\n\')\n'
        "    os._exit(0)\n"
    )
    result = run_function(code, "f", None, limits=LIMITS)
    assert not result.ok and result.failure == "bad_result", result


def test_verdict_details_are_clipped_and_storable() -> None:
    # Before: one reply produced 62.9 MB of verdict details (node attributes copied in).
    node = {"attrs": {"name": "x" * 500, "cap": math.nan}}
    details = {"nodes": [{"id": f"n{i}", **node} for i in range(5000)]}
    app = HostileApp(details=details)
    result = run_episode(app, app.generate(1, 1)[0], ScriptedClient(["answer"]))
    encoded = json.dumps(result.details, allow_nan=False)  # raises on NaN / Infinity
    assert len(encoded.encode()) <= DETAILS_MAX_BYTES + 1024
    assert result.details.get("clipped") is True and result.details["bytes"] > DETAILS_MAX_BYTES


def test_transcripts_are_clipped_per_entry_and_per_episode() -> None:
    huge = "y" * (TRANSCRIPT_ENTRY_MAX_CHARS * 3)
    app = HostileApp(steps_until_done=60, info={"blob": [math.inf] * 10_000, "nul": "a\x00b"})
    result = run_episode(app, app.generate(1, 2)[0], ScriptedClient([huge] * 60), max_steps=60)
    contents = [entry["content"] for entry in result.transcript]
    assert max(len(text) for text in contents) <= TRANSCRIPT_ENTRY_MAX_CHARS + 100
    assert sum(len(text) for text in contents) <= TRANSCRIPT_MAX_CHARS + 200
    assert result.transcript[-1]["role"] == "note"
    infos = [entry["info"] for entry in result.transcript if "info" in entry]
    sizes = [len(json.dumps(info, allow_nan=False)) for info in infos]
    assert sizes and max(sizes) <= INFO_MAX_BYTES + 1024
    assert "\x00" not in json.dumps(result.transcript)


def _strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"non-finite {name}")

    return json.loads(text, parse_constant=refuse)


STORABLE_CASES = [
    ({"x": math.nan, "y": [math.inf, -math.inf]}, True),
    ({"text": "nul\x00byte", "lone": "\ud800"}, True),
    ({"deep": json.loads("[" * 600 + "]" * 600)}, False),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("value", "refused_raw"), STORABLE_CASES)
def test_clipped_values_are_accepted_by_the_database_json(value, refused_raw: bool) -> None:
    # On PostgreSQL (the production database; scripts/test.sh runs the django_db tests there
    # too) the clipped value must be accepted by jsonb, and the raw value, as a control, not.
    from django.db import connection

    clipped = json.dumps(clip_json(value))
    assert "\\u0000" not in clipped
    _strict_json(clipped)
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb", [clipped])
        assert cursor.fetchone() is not None
    if refused_raw:
        from django.db import DatabaseError, transaction

        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT %s::jsonb", [json.dumps(value)])
