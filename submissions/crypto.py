"""Encryption at rest of agent API keys (Fernet: AES-128-CBC + HMAC-SHA256, ``cryptography``).

The key comes from ``NETARENA_SECRET_ENCRYPTION_KEY`` (a Fernet key) when set, otherwise it is
derived from ``SECRET_KEY`` with HKDF-SHA256, so rotating ``SECRET_KEY`` without setting the
dedicated key makes stored secrets unreadable (they then count as absent, never crash).

Rotation: put the new key in ``NETARENA_SECRET_ENCRYPTION_KEY`` and the old one(s) in
``NETARENA_SECRET_ENCRYPTION_OLD_KEYS`` (comma-separated); secrets under an old key still decrypt
(``MultiFernet``), and ``manage.py rotate_agent_secrets`` re-encrypts every stored secret under
the new key, after which the old keys can go.
"""

from __future__ import annotations

import base64
import os

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def _fernet() -> MultiFernet:
    """The current key first, then ``NETARENA_SECRET_ENCRYPTION_OLD_KEYS`` (decryption only)."""
    old = [k.strip() for k in os.environ.get("NETARENA_SECRET_ENCRYPTION_OLD_KEYS", "").split(",")]
    return MultiFernet([_current_fernet(), *(Fernet(k.encode()) for k in old if k)])


def _current_fernet() -> Fernet:
    explicit = os.environ.get("NETARENA_SECRET_ENCRYPTION_KEY")
    if explicit:
        return Fernet(explicit.encode())
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"netarena-agent-secrets", info=b"fernet"
    ).derive(settings.SECRET_KEY.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def encrypt_secret(plaintext: str) -> bytes:
    """Encrypt an API key; the empty string stays empty (no secret)."""
    return b"" if not plaintext else _fernet().encrypt(plaintext.encode())


def decrypt_secret(token: bytes | memoryview) -> str | None:
    """Decrypt a stored API key; ``None`` when there is none or it cannot be decrypted."""
    raw = bytes(token)
    if not raw:
        return None
    try:
        return _fernet().decrypt(raw).decode()
    except InvalidToken:
        return None


def rotate_secret(token: bytes | memoryview) -> bytes | None:
    """Re-encrypt a stored API key under the current key; ``b""`` stays ``b""``; ``None`` when
    no configured key decrypts it (left as it is by the caller)."""
    raw = bytes(token)
    if not raw:
        return b""
    try:
        return _fernet().rotate(raw)
    except InvalidToken:
        return None
