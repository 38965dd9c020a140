"""The canonical profile: toolserver's own tools, in any coordinate convention, with Hermes calls in `/act`.

Seed profiles (every other module here) are frozen reproductions of one system each: they list that system's
tools, texts and quirks and do not gain new tools. New canonical tools join this profile.
"""

from __future__ import annotations

from toolserver.formats.hermes import HERMES
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.tools.doc_pages import DocPageByIndex, DocPageSearch
from toolserver.tools.keypoint_zoom import KeypointZoom
from toolserver.tools.lookback import LookbackReuse
from toolserver.tools.magnify import Magnify
from toolserver.tools.rotate import Rotate
from toolserver.tools.run_python import RunPython
from toolserver.tools.select_frames import SelectFrames
from toolserver.tools.super_resolution import SuperResolution
from toolserver.tools.validators import validators
from toolserver.tools.zoom_in import ZoomIn

PROFILES = (
    Profile("default", "Canonical toolset: zoom_in, keypoint_zoom, lookback_reuse, rotate, select_frames, "
            "super_resolution, magnify, document page retrieval, run_python (code in a sandbox) and the 19 "
            "instruction-following validators, any coordinate convention.",
            tools_by_name(ZoomIn(), KeypointZoom(), LookbackReuse(), Rotate(), SelectFrames(), SuperResolution(),
                          Magnify(), DocPageSearch(), DocPageByIndex(), RunPython(), *validators(strict=True)),
            call_format=HERMES),
)
