"""Deployment: production settings pass ``check --deploy``; docker-compose.yml validates.

``docker compose config`` (or the stand-alone ``docker-compose``) resolves the file the way the
engine would; no Docker daemon is needed. Locally a missing compose client skips those tests;
under ``CI=true`` it fails them.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.fernet import Fernet

from config.workers import REST, compose_consumers, compose_problems, worker_command
from evaluator.registry import CONTROL_QUEUE, app_ids, worker_queues
from evaluator.testing import GuessApp, registered_app
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
#: Queues whose episodes need a privileged container (Mininet; the embedded cluster): a
#: deployment decision about two shipped apps, not a list of apps (the queues come from the
#: registry, ``evaluator.registry.worker_queues()``).
PRIVILEGED_QUEUES = {"route", "k8s"}


def _production_env(**overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "NETARENA_SECRET", "NETARENA_QUERY_ID"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings_production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
        NETARENA_SECRET_ENCRYPTION_KEY=Fernet.generate_key().decode(),
        NETARENA_QUERY_ID_KEY=secrets.token_urlsafe(32),
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v != ""}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_production_settings_pass_check_deploy() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=_production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set"),
        ({"NETARENA_SECRET_ENCRYPTION_KEY": ""}, "NETARENA_SECRET_ENCRYPTION_KEY must be set"),
        ({"NETARENA_QUERY_ID_KEY": ""}, "NETARENA_QUERY_ID_KEY must be set"),
        (
            {"DJANGO_SECRET_KEY": "netarena-local-development-key-not-for-production"},
            "fresh random value",
        ),
    ],
)
def test_production_settings_refuse_missing_or_default_keys(
    overrides: dict[str, str], message: str
) -> None:
    result = _manage("check", env=_production_env(**overrides))
    assert result.returncode != 0
    assert message in result.stderr


def _compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run(
        [docker, "compose", "version"], capture_output=True, check=False
    ).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    require(standalone is not None, "neither `docker compose` nor `docker-compose` is installed")
    assert standalone is not None
    return [standalone]


def _compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_compose_command(), "-f", str(ROOT / "docker-compose.yml"), "config"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def _text(command: str | list[str]) -> str:
    """A compose ``command`` (string or list, depending on the client) as one string."""
    return command if isinstance(command, str) else " ".join(command)


REQUIRED = {
    "DJANGO_SECRET_KEY": "k" * 60,
    "NETARENA_SECRET_ENCRYPTION_KEY": "fernet-key",
    "NETARENA_QUERY_ID_KEY": "q" * 40,
    "POSTGRES_PASSWORD": "pw",
    "DJANGO_ALLOWED_HOSTS": "leaderboard.example.org",
}


def test_compose_file_validates_with_a_worker_per_queue() -> None:
    result = _compose_config({"PATH": os.environ["PATH"], **REQUIRED})
    assert result.returncode == 0, result.stderr
    compose = yaml.safe_load(result.stdout)
    services = compose["services"]
    assert {"web", "beat", "redis", "db"} <= set(services)
    assert "exec gunicorn config.wsgi:application" in _text(services["web"]["command"])
    # every queue of the registry has exactly one consumer, as the compose client renders it
    assert compose_problems(compose) == []
    consumers = compose_consumers(compose)
    assert sorted(q for queues in consumers.values() for q in queues) == sorted(worker_queues())
    for name, queues in consumers.items():
        service = services[name]
        assert _text(service["command"]) == "python -m config.workers start", name
        privileged = bool(service.get("privileged"))
        assert privileged == bool(PRIVILEGED_QUEUES & set(queues)), name
        assert service["environment"]["DJANGO_SETTINGS_MODULE"] == "config.settings_production"
        assert service["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    # the worker of every other app: a new app is consumed with no change to the file
    rest = [s for s in services.values() if s.get("environment", {}).get(
        "NETARENA_WORKER_QUEUES") == REST]
    assert len(rest) == 1 and not rest[0].get("privileged")
    assert _text(services["beat"]["command"]).startswith("celery -A config beat")


def test_compose_check_fails_when_a_registered_queue_has_no_consumer() -> None:
    """``python -m config.workers check``: passes on the shipped file; a file whose catch-all
    worker is gone (or excludes a queue nobody consumes) fails, naming the queue."""
    done = subprocess.run(
        [sys.executable, "-m", "config.workers", "check"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose_problems(compose) == []
    rest = next(n for n, s in compose["services"].items()
                if s.get("environment", {}).get("NETARENA_WORKER_QUEUES") == REST)
    without_rest = {"services": {n: s for n, s in compose["services"].items() if n != rest}}
    control_only = {"services": {"w": {"environment": {"NETARENA_WORKER_QUEUES": "control"}}}}
    assert compose_problems(control_only) == [
        f"no worker consumes queue(s): {', '.join(app_ids())}"
    ]
    with registered_app({"guess": GuessApp}):
        assert compose_problems(without_rest) == ["no worker consumes queue(s): guess"]
        assert compose_problems(compose) == []  # the catch-all consumes it
    doubled = {"services": {**compose["services"], "again": {
        "environment": {"NETARENA_WORKER_QUEUES": CONTROL_QUEUE}}}}
    assert any("consumed by" in p for p in compose_problems(doubled))


def test_worker_command_consumes_the_queues_of_its_environment() -> None:
    single = worker_command(
        {"NETARENA_WORKER_QUEUES": "control", "NETARENA_WORKER_CONCURRENCY": "2"}
    )
    assert single == ["celery", "-A", "config", "worker", "-Q", "control", "--concurrency", "2",
                      "--hostname", "control@%h", "--loglevel", "INFO"]
    everything_else = {"NETARENA_WORKER_QUEUES": REST, "NETARENA_WORKER_EXCEPT": ",".join(
        worker_queues())}
    assert worker_command(everything_else) is None  # idles
    with registered_app({"guess": GuessApp}):
        command = worker_command(everything_else)
        assert command is not None and command[command.index("-Q") + 1] == "guess"
    with pytest.raises(ValueError, match="NETARENA_WORKER_QUEUES"):
        worker_command({})


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_compose_refuses_to_render_without_each_secret(missing: str) -> None:
    env = {"PATH": os.environ["PATH"], **{k: v for k, v in REQUIRED.items() if k != missing}}
    result = _compose_config(env)
    assert result.returncode != 0
    assert missing in result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
@pytest.mark.slow
def test_gunicorn_serves_pages_and_hashed_static_files_in_production(tmp_path: Path) -> None:
    """The production web process: gunicorn + WhiteNoise, HSTS, HTTPS redirect, secure cookies."""
    gunicorn = shutil.which("gunicorn", path=str(Path(sys.executable).parent))
    require(gunicorn is not None, "gunicorn is not installed (requirements.txt)")
    assert gunicorn is not None
    env = _production_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
    )
    for args in (("migrate", "--noinput"), ("collectstatic", "--noinput")):
        done = _manage(*args, env=env)
        assert done.returncode == 0, done.stderr
    manifest = (tmp_path / "static" / "staticfiles.json").read_text()
    hashed_css = yaml.safe_load(manifest)["paths"]["css/site.css"]
    assert hashed_css != "css/site.css"

    port = _free_port()
    server = subprocess.Popen(
        [gunicorn, "config.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10.0) as client:
            for _ in range(100):
                try:
                    plain = client.get("/")
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            else:
                pytest.fail("gunicorn did not answer within 20 s")
            assert plain.status_code == 301
            assert plain.headers["location"].startswith("https://127.0.0.1")
            # the container health probe: plain HTTP, any Host header
            alive = client.get("/healthz", headers={"Host": "web:8000"})
            assert (alive.status_code, alive.text) == (200, "ok\n")
            assert client.get("/readyz?format=json").status_code in (200, 503)  # no redirect
            https = {"X-Forwarded-Proto": "https"}
            page = client.get("/accounts/login/", headers=https)
            assert page.status_code == 200
            assert page.headers["strict-transport-security"].startswith("max-age=31536000")
            assert "Secure" in page.headers["set-cookie"]
            assert f"/static/{hashed_css}" in page.text
            css = client.get(f"/static/{hashed_css}", headers=https)
            assert css.status_code == 200 and ".site-nav" in css.text
            assert "max-age=315360000" in css.headers["cache-control"]  # WhiteNoise: immutable
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_env_example_names_every_setting_the_compose_file_reads() -> None:
    example = (ROOT / ".env.example").read_text()
    names = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (ROOT / "docker-compose.yml").read_text()))
    assert used <= names, f"missing from .env.example: {sorted(used - names)}"
    assert set(REQUIRED) <= names
    # the required secrets are left blank: a copied example must not start with a known key
    for name in ("DJANGO_SECRET_KEY", "NETARENA_SECRET_ENCRYPTION_KEY", "NETARENA_QUERY_ID_KEY",
                 "POSTGRES_PASSWORD"):
        assert re.search(rf"^{name}=$", example, flags=re.MULTILINE), name


def test_dockerfile_builds_every_target_the_compose_file_names() -> None:
    """Static check of the Dockerfile: stages, COPY sources, the runtime image's contents."""
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(str(ROOT / "Dockerfile"))
    stages: dict[str, list[dict[str, Any]]] = {}
    current = ""
    for item in parser.structure:
        if item["instruction"] == "FROM":
            base, _, name = item["value"].partition(" AS ")
            assert base.split()[0] in ("debian:12", "scratch", *stages), f"unknown base {base}"
            current = name.strip()
            stages[current] = []
        elif current:
            stages[current].append(item)
    assert {"extra-ca", "runtime", "k8s-binaries", "worker-k8s", "test"} <= set(stages)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    targets = {s["build"]["target"] for s in compose["services"].values() if "build" in s}
    assert targets == {"runtime", "worker-k8s"}
    for stage, items in stages.items():
        for item in items:
            if item["instruction"] != "COPY" or "--from=" in item["value"]:
                continue
            *sources, _dest = item["value"].split()
            for source in sources:
                assert source == "." or (ROOT / source).exists(), f"{stage}: COPY {source}"
    runs = " ".join(i["value"] for i in stages["runtime"] if i["instruction"] == "RUN")
    assert "NETARENA_SETUP=runtime" in runs and "requirements-dev" not in runs
    assert {"instruction": "USER", "value": "netarena"}.items() <= next(
        i for i in stages["runtime"] if i["instruction"] == "USER"
    ).items()
    worker_k8s = " ".join(i["value"] for i in stages["worker-k8s"])
    assert "/opt/k8s/bin" in worker_k8s and "NETARENA_KUBECTL" in worker_k8s
    # only the emulator workers run privileged
    privileged = {n for n, s in compose["services"].items() if s.get("privileged")}
    assert privileged == {"worker-route", "worker-k8s"}
