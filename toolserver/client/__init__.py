"""Python clients for a toolserver: `Client` (sync) and `AsyncClient`, both on httpx.

    from toolserver.client import Client

    with Client("http://127.0.0.1:8000") as ts, ts.create_session([image]) as session:
        result = session.call("zoom_in", image_key="img_0", bbox=[100, 100, 500, 400])
        messages = session.run_tool_calls(completion.choices[0].message.tool_calls).messages

Images go up once per session (PIL images, local paths and bytes as multipart files; `ImageInput` for a
server path, a URL or a data URI) and are then named by key. Tool failures are results (`ok=False`, text for
the model); protocol failures raise `ToolServerError` subclasses. 429 and 503 answers are retried with
exponential backoff that honours `Retry-After`; so are connections that never reached the server. A read
timeout is not retried (the call may have run) and raises `ToolServerTimeout`. A session created with
`output={"delivery": "shm"}` on the server's host gets its tool images as raw pixels in shared memory:
`read_shm(result.images[0])` maps them as a numpy array (`shm_image` for a PIL image).
"""

# Besides `__all__`, the names the single-module client had (the default URL, the input types, the models its
# methods take and return) stay importable from here, as redundant aliases so the linters read them as re-exports.
from toolserver.client.aio import AsyncClient, AsyncSession
from toolserver.client.errors import (
    SessionNotFound,
    ToolServerError,
    ToolServerOverloaded,
    ToolServerTimeout,
    ToolServerUnavailable,
)
from toolserver.client.payloads import DEFAULT_URL as DEFAULT_URL
from toolserver.client.payloads import ImageLike as ImageLike
from toolserver.client.payloads import ImageMessage as ImageMessage
from toolserver.client.shm import ShmHandleGone, read_shm, shm_image
from toolserver.client.sync import Client, Session
from toolserver.models import ActResponse as ActResponse
from toolserver.models import AddedImages as AddedImages
from toolserver.models import AddedTexts as AddedTexts
from toolserver.models import ImageInfo as ImageInfo
from toolserver.models import ImageInput
from toolserver.models import OutputSettings as OutputSettings
from toolserver.models import SessionCreated as SessionCreated
from toolserver.models import SessionInfo as SessionInfo
from toolserver.models import ToolCallsResponse as ToolCallsResponse
from toolserver.models import ToolResult as ToolResult
from toolserver.models import ValidateItem as ValidateItem
from toolserver.models import ValidateResponse as ValidateResponse
from toolserver.models import ValidateResult as ValidateResult
from toolserver.models import ViewSettings as ViewSettings

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "Client",
    "ImageInput",
    "Session",
    "SessionNotFound",
    "ShmHandleGone",
    "ToolServerError",
    "ToolServerOverloaded",
    "ToolServerTimeout",
    "ToolServerUnavailable",
    "read_shm",
    "shm_image",
]
