"""Signals the submission services send (receivers live in the apps that care).

``submission_closed`` is sent once the transaction that closed a submission as finished or
failed commits, with ``submission_id``; ``accounts`` connects the finish e-mail to it
(``accounts.notifications``), so that ``submissions`` never imports ``accounts``.
"""

from django.dispatch import Signal

#: Sent with ``submission_id`` after a submission finished or failed (not when cancelled).
submission_closed = Signal()
