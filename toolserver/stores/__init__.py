"""Where sessions live: the store contract, the in-memory store (one process) and the Redis store (several
replicas). `build_store` picks one from the settings; the Redis client is imported only when it is used."""

from __future__ import annotations

from toolserver.config import Settings
from toolserver.stores.contract import CALL_LOG_LIMIT, SessionStore, SessionSummary, StoreGauge
from toolserver.stores.memory import MemoryStore

__all__ = ["CALL_LOG_LIMIT", "MemoryStore", "SessionStore", "SessionSummary", "StoreGauge", "build_store"]


def build_store(s: Settings) -> SessionStore:
    if s.session_store == "redis":
        from toolserver.stores.node_pixels import NodePixels
        from toolserver.stores.redis import RedisStore

        # The server processes of one node (`serve --workers N`) hold decoded images once, in the node's directory.
        node = None
        if s.node_dir is not None and (s.node_pixels_bytes > 0 or s.node_holds_images):
            node = NodePixels(s.node_dir / "pixels", s.node_pixels_bytes)
        # A call waits for a busy session as long as the longest tool call may hold it.
        return RedisStore(s.redis_url, session_max_bytes=s.session_max_bytes, decoded_cache_bytes=s.decoded_cache_bytes,
                          lock_timeout_s=s.tool_timeout_s + 30, lock_lease_s=s.lock_lease_s,
                          timeout_s=s.redis_timeout_s, prefix=s.redis_prefix, retry_after_s=s.retry_after_s,
                          node_pixels=node, holds_images=s.node_holds_images)
    return MemoryStore(session_max_bytes=s.session_max_bytes, total_max_bytes=s.total_max_bytes)
