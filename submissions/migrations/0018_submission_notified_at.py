"""When a submission's team was e-mailed that it finished or failed (at most once)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0017_merge_openai_tools_preflight_partial"),
    ]

    operations = [
        migrations.AddField(
            model_name="submission",
            name="notified_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
