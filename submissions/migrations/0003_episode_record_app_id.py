"""Rename the Django ``Episode`` model to ``EpisodeRecord`` and its ``app`` field to ``app_id``.

One name per concept: ``app_id`` everywhere for the app id, and a model name a reader
cannot confuse with the engine's ``Episode``. The table is renamed in place; no data changes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0002_alter_agent_protocol"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="episode", name="unique_episode"),
        migrations.RenameModel(old_name="Episode", new_name="EpisodeRecord"),
        migrations.RenameField(model_name="episoderecord", old_name="app", new_name="app_id"),
        migrations.RenameIndex(
            model_name="episoderecord",
            new_name="submissions_submiss_525bb4_idx",
            old_name="submissions_submiss_1eec91_idx",
        ),
        migrations.AlterModelOptions(
            name="episoderecord",
            options={"ordering": ["submission", "app_id", "index"]},
        ),
        migrations.AddConstraint(
            model_name="episoderecord",
            constraint=models.UniqueConstraint(
                fields=("submission", "app_id", "index"), name="unique_episode"
            ),
        ),
    ]
