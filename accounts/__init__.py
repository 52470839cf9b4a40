"""User accounts: sign up, log in, log out, password reset (Django's auth views), a team page."""
