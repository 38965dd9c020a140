"""Stand-ins that let TIGER-AI-Lab/verl-tool @ 980962b run its tool server (pixel_reasoner) and import its
client (verl_tool.agent_loop.verltool_agent_loop) without torch, torchvision, ray, vllm or verl installed,
and with no file of verl-tool edited.

Put this directory FIRST on PYTHONPATH (before verl-tool's tree); Python imports sitecustomize at startup,
child processes inherit PYTHONPATH (serve.py's backends, uvicorn's spawned router workers), so every process
gets the same stand-ins.

Each stand-in is a module served by a meta-path finder, created only if something imports that exact name
(nothing is pre-loaded); every name below is imported on the crop path but never *used* there.  Anything
else (vision_utils.py, vision_process.py, the tools, the server) is verl-tool's own file, loaded as is.

Chaining: if another sitecustomize exists further down sys.path, it is run after this one (the bench venv
at .bench/verl-tool/venv and its python3.11 have none).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

VERL_TOOL_SHIM = True
ORIGIN = "verl-tool shim"


def _torch(m):
    # torch: vision_utils.py/vision_process.py `import torch`; only the video functions use it, and the one
    # annotation evaluated at import (`def process_video(...) -> torch.Tensor`) needs the name Tensor.
    m.Tensor = type("Tensor", (), {"__module__": "torch"})


def _torchvision(m):
    # torchvision: vision_process.py `import torchvision` (its __version__ is read only when reading a video).
    m.__version__ = "0+verl-tool-shim"


def _torchvision_io(m):
    # torchvision.io: `from torchvision import io`; read_video is called only by the video readers.
    pass


def _torchvision_transforms(m):
    # torchvision.transforms: `from torchvision import transforms` + `InterpolationMode`; fetch_video only.
    m.InterpolationMode = type("InterpolationMode", (), {"BICUBIC": "bicubic"})


def _verl_vision_utils(m):
    # verl.utils.dataset.vision_utils: vision_utils.py imports VIDEO_FORMAT_HELP, the message of the
    # NotImplementedError process_video raises for a malformed *video* (never a crop).
    m.VIDEO_FORMAT_HELP = "(verl-tool shim) see verl.utils.dataset.vision_utils.VIDEO_FORMAT_HELP"


def _ray(m):
    # ray: finish.py `import ray` for one `isinstance(tool, ray.actor.ActorHandle)` per finish; without
    # --use_ray the tools are local objects, so an empty ActorHandle class gives the same False.
    actor = types.ModuleType("ray.actor")
    actor.ActorHandle = type("ActorHandle", (), {"__module__": "ray.actor"})
    sys.modules["ray.actor"] = m.actor = actor


def _agent_loop_package(m):
    # verl_tool.agent_loop: its __init__.py imports verl's vllm/ray/hydra stack; the crop path needs only
    # the package's vision_utils.py and vision_process.py, which still load from the real directory
    # (__path__ is kept), only __init__.py is not run.
    pass


def _agent_loop_base(m):
    # verl_tool.agent_loop.agent_loop (client only): verltool_agent_loop.py subclasses AgentLoopBase, applies
    # @register(...) and names AgentLoopOutput in `run`; the real module imports hydra/ray/torch/verl.
    # interact_with_tool_server and the methods under it use none of them.
    class AgentLoopBase:
        _class_initialized = False

    class AgentLoopOutput:
        pass

    m.AgentLoopBase, m.AgentLoopOutput = AgentLoopBase, AgentLoopOutput
    m.register = lambda agent_name: (lambda cls: cls)


def _verl_profiler(m):
    # verl.utils.profiler (client only): verltool_agent_loop.py imports simple_timer, used only in `run`.
    import contextlib

    m.simple_timer = lambda name, timing_raw: contextlib.nullcontext()


def _audio_utils(m):
    # verl_tool.utils.dataset.audio_utils (client only): imports torch/librosa/qwen_omni_utils; its
    # encode_audio_data is called only in `run` for audio inputs.
    def encode_audio_data(*args, **kwargs):
        raise NotImplementedError("verl-tool shim: audio is not supported here")

    m.encode_audio_data = encode_audio_data


def _package(m):
    # parent packages of the stand-ins above (torchvision, verl, verl.utils, verl.utils.dataset): empty.
    pass


# name -> (filler, is_package)
STAND_INS = {
    "torch": (_torch, False),
    "torchvision": (_torchvision, True),
    "torchvision.io": (_torchvision_io, False),
    "torchvision.transforms": (_torchvision_transforms, False),
    "verl": (_package, True),
    "verl.utils": (_package, True),
    "verl.utils.dataset": (_package, True),
    "verl.utils.dataset.vision_utils": (_verl_vision_utils, False),
    "verl.utils.profiler": (_verl_profiler, False),
    "ray": (_ray, True),
    "verl_tool.agent_loop": (_agent_loop_package, True),
    "verl_tool.agent_loop.agent_loop": (_agent_loop_base, False),
    "verl_tool.utils.dataset.audio_utils": (_audio_utils, False),
}


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name not in STAND_INS:
            return None
        is_package = STAND_INS[name][1]
        spec = importlib.machinery.ModuleSpec(name, self, origin=ORIGIN, is_package=is_package)
        if name == "verl_tool.agent_loop":
            # keep the real directory as __path__ so its submodules load from verl-tool's files
            spec.submodule_search_locations = [
                os.path.join(p, "agent_loop") for p in (path or []) if os.path.isdir(os.path.join(p, "agent_loop"))
            ]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        STAND_INS[module.__name__][0](module)


def install():
    """Add the finder once (also callable from a process that started without this on PYTHONPATH)."""
    if not any(isinstance(f, _StandInFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandInFinder())


def _chain_other_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


install()
if __name__ == "sitecustomize":
    _chain_other_sitecustomize()
