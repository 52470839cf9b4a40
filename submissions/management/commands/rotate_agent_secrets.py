"""``manage.py rotate_agent_secrets``: re-encrypt every agent's stored API key under the current
``NETARENA_SECRET_ENCRYPTION_KEY`` (old keys in ``NETARENA_SECRET_ENCRYPTION_OLD_KEYS``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from submissions.crypto import rotate_secret
from submissions.models import Agent


class Command(BaseCommand):
    help = "Re-encrypt stored agent API keys under the current encryption key."

    def handle(self, *args: Any, **options: Any) -> None:
        rotated = unreadable = 0
        with transaction.atomic():
            for agent in Agent.objects.select_for_update().exclude(secret_encrypted=b""):
                token = rotate_secret(agent.secret_encrypted)
                if token is None:
                    unreadable += 1
                    continue
                agent.secret_encrypted = token
                agent.save(update_fields=["secret_encrypted"])
                rotated += 1
        self.stdout.write(f"rotated {rotated} agent secret(s); {unreadable} unreadable (kept)")
        if unreadable:
            self.stderr.write("unreadable secrets: add their key to "
                              "NETARENA_SECRET_ENCRYPTION_OLD_KEYS and run again")
