"""What the model saw, for people and programs: a session's memory map, its call log as a trajectory, and the
list of live sessions (the inspector page reads these)."""

from __future__ import annotations

import json

from toolserver.core.wiring import Services
from toolserver.models import (
    CallRecord,
    SessionInfo,
    SessionList,
    SessionSummaryInfo,
    TextInfo,
    Trajectory,
    TrajectoryImage,
)


class Inspection:
    def __init__(self, services: Services):
        self.store = services.store

    async def session_info(self, session_id: str) -> SessionInfo:
        session = await self.store.get(session_id)
        return SessionInfo(
            session_id=session.id, settings=session.settings, images=[e.info() for e in session.images],
            texts=[TextInfo(key=k, length=n) for k, n in session.text_lengths.items()],
            tool_calls=session.tool_calls, bytes_held=session.nbytes, expires_in_s=session.expires_in(),
        )

    async def trajectory(self, session_id: str) -> Trajectory:
        """The session's images and its call log, oldest call first."""
        session = await self.store.get(session_id)
        records, dropped = await self.store.call_log(session)
        calls = [CallRecord(seq=dropped + i + 1, **json.loads(line)) for i, line in enumerate(records)]
        images = [TrajectoryImage(key=e.key, index=e.index, width=e.size[0], height=e.size[1], origin=e.origin)
                  for e in session.images]
        return Trajectory(session_id=session.id, profile=session.settings.profile, images=images, calls=calls,
                          dropped_calls=dropped)

    async def list_sessions(self, offset: int = 0, limit: int = 50) -> SessionList:
        rows, total = await self.store.list_sessions(offset, limit)
        return SessionList(sessions=[SessionSummaryInfo(**vars(row)) for row in rows], total=total, offset=offset,
                           limit=limit)
