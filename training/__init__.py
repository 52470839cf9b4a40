"""The benchmark as a training ground: SFT export and Gymnasium environments.

Engine side (no Django import): :mod:`training.sft` exports execution-checked chat examples,
:mod:`training.gym_envs` wraps each app as a Gymnasium environment. Importing this package
registers ``netarena/malt-v1``, ``netarena/route-v1`` and ``netarena/k8s-v1``
(:func:`training.gym_envs.register_envs`); see docs/training.md.
"""

from __future__ import annotations

from training.gym_envs import ENV_IDS, register_envs

register_envs()

__all__ = ["ENV_IDS", "register_envs"]
