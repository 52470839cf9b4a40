"""Merge of the two 0011 migrations (A10 pre-flight, P10 cancel/heartbeat/incomplete)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0011_a10_agent_preflight"),
        ("submissions", "0011_p10_cancel_heartbeat_incomplete"),
    ]

    operations = []
