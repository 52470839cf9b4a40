"""Merge of the two 0011 migrations (agent pre-flight; cancel, heartbeat and incomplete submissions).

The file name keeps the work-item codes it was created under (a10, p10): renaming an applied
migration would break existing databases.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0011_a10_agent_preflight"),
        ("submissions", "0011_p10_cancel_heartbeat_incomplete"),
    ]

    operations = []
