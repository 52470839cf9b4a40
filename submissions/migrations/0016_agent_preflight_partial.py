"""A pre-flight may end ``partial``: the endpoint checks passed and the canaries of some apps
passed while others failed (the agent may be submitted to the apps that passed)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0015_held_out_aggregates"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agentpreflight",
            name="status",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("passed", "Passed"),
                    ("partial", "Partial"),
                    ("failed", "Failed"),
                ],
                default="running",
                max_length=10,
            ),
        ),
    ]
