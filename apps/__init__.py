"""The benchmark applications (plain packages, not Django apps)."""
