"""Agent.protocol gains ``openai-tools`` (OpenAI-compatible tool calling)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0015_held_out_aggregates"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="protocol",
            field=models.CharField(
                choices=[
                    ("openai-chat", "OpenAI-compatible chat"),
                    ("http-json", "HTTP JSON"),
                    ("a2a", "Agent2Agent (A2A)"),
                    ("openai-tools", "OpenAI-compatible tool calling"),
                ],
                max_length=20,
            ),
        ),
    ]
