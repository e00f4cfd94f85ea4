"""AES-256-GCM sealing of single values, bound to the secret's name.

The name is the associated data, so a ciphertext copied from one entry to another (or an
inline token re-labelled with a different name) fails authentication instead of quietly
decrypting to the wrong secret. Every call draws a fresh random 96-bit nonce; with one key
per vault and rotation available, the random-nonce collision bound is never approached.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from soulflow.security.errors import InvalidCiphertext, InvalidKeyError
from soulflow.security.syntax import NONCE_SIZE, decode_token, encode_token

KEY_SIZE = 32
_FINGERPRINT_INFO = b"soulflow/vault/value-fingerprint/v1"


def generate_key() -> bytes:
    """A fresh 256-bit key from the OS CSPRNG."""
    return os.urandom(KEY_SIZE)


class Sealer:
    """Encrypts/decrypts tokens with one key; cheap to build, holds no other state."""

    __slots__ = ("_aead", "_fingerprint_key")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_SIZE:
            raise InvalidKeyError(f"key is {len(key)} bytes, expected {KEY_SIZE}.")
        self._aead = AESGCM(key)
        # A separate subkey so the AES key is never used for a second purpose.
        self._fingerprint_key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=_FINGERPRINT_INFO
        ).derive(key)

    def __repr__(self) -> str:
        return "Sealer(<key hidden>)"

    def encrypt(self, name: str, plaintext: str) -> str:
        """Seal ``plaintext`` under ``name``; returns an ``sv1.`` token."""
        nonce = os.urandom(NONCE_SIZE)
        data = self._aead.encrypt(nonce, plaintext.encode("utf-8"), name.encode("utf-8"))
        return encode_token(nonce, data)

    def decrypt(self, name: str, token: str) -> str:
        """Open a token sealed under ``name``; raise `InvalidCiphertext` on any failure."""
        nonce, data = decode_token(token)
        try:
            raw = self._aead.decrypt(nonce, data, name.encode("utf-8"))
        except InvalidTag:
            raise InvalidCiphertext(
                f"ciphertext for {name!r} failed authentication (tampered, or sealed with "
                "another key or name); set the secret again."
            ) from None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCiphertext(
                f"ciphertext for {name!r} does not hold UTF-8 text; set the secret again."
            ) from None

    def fingerprint(self, value: str, length: int = 12) -> str:
        """Keyed short hash of a value, for naming sealed values without revealing them.

        A plain SHA-256 prefix of a 4-digit PIN or a short password can be reversed by brute
        force in moments, and these names end up in logs and model context; an HMAC under a
        key derived from the vault key cannot.
        """
        digest = hmac.new(self._fingerprint_key, value.encode("utf-8"), hashlib.sha256)
        return digest.hexdigest()[:length]
