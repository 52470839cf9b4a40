"""Django app: submissions."""
