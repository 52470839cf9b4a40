"""Reset pools: built emulator environments reused across episodes, restored and verified
between them (the contract: :mod:`evaluator.reset_pool.pool`)."""

from evaluator.reset_pool.pool import ResetPool
from evaluator.reset_pool.process import PoolRegistry, shutdown_all
from evaluator.reset_pool.stats import ResetStats
from evaluator.reset_pool.switch import pool_env, pool_size

__all__ = ["PoolRegistry", "ResetPool", "ResetStats", "pool_env", "pool_size", "shutdown_all"]
