"""Agent clients, one per wire protocol (DESIGN.md §6)."""
