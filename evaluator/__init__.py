"""NetArena evaluation engine: queries, episodes, agent clients, statistics (no Django)."""
