"""Which sessions a caller sees. With API keys configured, a session belongs to the key that created it: other
keys get 404 for it and do not list it. Operator keys (`OPERATOR_KEYS`) see every session, for the inspector.
Without keys, and in the server's own work (sweeps), nothing is restricted.

The caller is a context variable that the HTTP adapter sets per request (and the MCP adapter per call, from
the request's headers); stores read it when they look a session up or list them.
"""

from __future__ import annotations

import hashlib
import hmac
from contextvars import ContextVar

# The owner id of the calling key; None: the caller sees every session (no keys, an operator, the server).
caller: ContextVar[str | None] = ContextVar("toolserver_caller", default=None)


def owner_of(key: bytes) -> str:
    """A key's owner id: a digest, so that stores never hold the key itself."""
    return hashlib.sha256(b"toolserver-owner:" + key).hexdigest()[:32]


def may_see(owner: str | None) -> bool:
    who = caller.get()
    return who is None or owner == who


class Keys:
    """The configured keys: which one a bearer token is, in constant time per key."""

    def __init__(self, api_keys: list[str], operator_keys: list[str]):
        self.owners = [(k.encode(), owner_of(k.encode())) for k in api_keys]
        self.operators = [k.encode() for k in operator_keys]

    def __bool__(self) -> bool:
        return bool(self.owners or self.operators)

    def identify(self, authorization: str) -> tuple[bool, str | None]:
        """(accepted, owner id or None for an operator) for an `Authorization` header."""
        token = authorization[7:].encode() if authorization.lower().startswith("bearer ") else b""
        owners = [owner for key, owner in self.owners if hmac.compare_digest(token, key)]
        operator = any([hmac.compare_digest(token, key) for key in self.operators])
        if operator:
            return True, None
        return (True, owners[0]) if owners else (False, None)
