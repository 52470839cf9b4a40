"""The benchmark as a training ground: SFT export and Gymnasium environments.

Engine side (no Django import): :mod:`training.sft` exports execution-checked chat examples,
:mod:`training.gym_envs` wraps each app as a Gymnasium environment. Importing this package
registers one environment ``netarena/<app_id>-v1`` per app of the registry
(:func:`training.gym_envs.register_envs`); see docs/training.md.
"""

from __future__ import annotations

from training.gym_envs import ENV_IDS, env_id, register_envs

register_envs()

__all__ = ["ENV_IDS", "env_id", "register_envs"]
