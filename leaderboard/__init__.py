"""Django app: leaderboard."""
