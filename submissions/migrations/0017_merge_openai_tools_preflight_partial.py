"""Merges the two 0016 migrations (the openai-tools protocol choice, the partial pre-flight)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0016_agent_protocol_openai_tools"),
        ("submissions", "0016_agent_preflight_partial"),
    ]

    operations: list[migrations.operations.base.Operation] = []
