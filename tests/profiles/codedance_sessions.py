"""The sessions CodeDance's goldens are recorded from (scripts/goldens/record_codedance.py) and replayed against
(test_codedance.py): each a list of assistant turns, run in order in one trajectory until the rollout ends it, with
or without its input image (made here from numbers alone)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

ANSWER = "<answer>3</answer>"


def input_image() -> Image.Image:
    """256x192: a gradient, noise in blue, a red square and a black label."""
    rng = np.random.default_rng(11)
    y, x = np.mgrid[0:192, 0:256]
    pixels = np.stack([x, y, rng.integers(0, 256, (192, 256))], -1).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    draw.rectangle([150, 40, 210, 100], fill=(220, 30, 30))
    draw.text((20, 150), "CodeDance", fill=(0, 0, 0))
    return image


def code(source: str, before: str = "Let me compute.\n") -> str:
    """A turn as the model writes it under its prompt: the code in a python fence inside <code>."""
    return f"{before}<code>\n```python\n{source}\n```\n</code>"


def glm(name: str, **arguments: object) -> str:
    """A call in GLM-4.5's markup: what sglang 0.5.5's parser reads `<tool_call>` as with Qwen2.5-VL's vocabulary."""
    pairs = "".join(f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n" for key, value in arguments.items())
    return f"<tool_call>{name}\n{pairs}</tool_call>"


RUN = "execute_python_code"
PLOT = ("import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2))\nplt.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.title('t')\nplt.show()")

SESSIONS: dict[str, tuple[bool, list[str]]] = {
    # -- texts: printed output, stderr, the last expression, nothing at all
    "print": (True, [code("print('hello')\nprint(2 + 2)"), ANSWER]),
    "silent": (True, [code("x = 41"), code("print(x + 1)"), ANSWER]),
    "last_expression": (True, [code("a = 3\na * 7"), code("'text'"), code("None"), code("[1, 'b', None]"), ANSWER]),
    "stderr": (True, [code("import sys\nprint('out')\nprint('err', file=sys.stderr)"), ANSWER]),
    "warning": (True, [code("import warnings\nwarnings.warn('careful')\nprint('after')"), ANSWER]),
    "exit": (True, [code("print('bye')\nexit()"), code("print('still here')"), ANSWER]),
    "sys_exit": (True, [code("import sys\nsys.exit(3)"), ANSWER]),
    # -- the input image: bound as `input_image`, a file in the working directory
    "input_image": (True, [code("print(input_image.size, input_image.mode, type(input_image).__name__)"),
                           code("import os\nprint(sorted(os.listdir('.')), os.path.basename(input_image_path))"),
                           code("from PIL import Image\nimg = Image.open('input_image.jpg')\nprint(img.getpixel((10, 20)),"
                                " input_image.getpixel((10, 20)))"), ANSWER]),
    "no_image": (False, [code("print('input_image' in globals(), 'input_image_path' in globals())"), ANSWER]),
    # -- images: the last expression, display(), numpy arrays, plt.show(), Image.show()
    "image_expression": (True, [code("input_image.crop((100, 50, 228, 178))"), ANSWER]),
    "image_small_resized": (True, [code("input_image.crop((0, 0, 50, 30))"), ANSWER]),
    "image_display": (True, [code("from PIL import Image\ncrop = input_image.crop((0, 0, 120, 90))\n"
                                  "display(crop.convert('L'))"), ANSWER]),
    "image_palette": (True, [code("input_image.crop((0, 0, 80, 80)).convert('P')"), ANSWER]),
    "image_rgba": (True, [code("im = input_image.convert('RGBA')\nim.putalpha(128)\nim"), ANSWER]),
    "image_extreme_ratio": (True, [code("from PIL import Image\nImage.new('RGB', (1000, 4))"), ANSWER]),
    "numpy_bgr": (True, [code("import numpy as np\na = np.zeros((60, 80, 3), np.uint8)\na[..., 0] = 255\na"),
                         ANSWER]),
    "numpy_float": (True, [code("import numpy as np\nnp.linspace(0, 2, 64 * 64).reshape(64, 64)"), ANSWER]),
    "numpy_vector": (True, [code("import numpy as np\nnp.arange(5)"), ANSWER]),
    "numpy_one_channel": (True, [code("import numpy as np\nnp.zeros((70, 70, 1), np.uint8)"), ANSWER]),
    "plt_show": (True, [code(PLOT), ANSWER]),
    "plt_two_figures": (True, [code(PLOT + "\nplt.figure(figsize=(2, 2))\nplt.bar([1, 2], [2, 1])\nplt.show()\n"
                                           "print('two')"), ANSWER]),
    "plt_no_axes": (True, [code("import matplotlib.pyplot as plt\nplt.figure()\nplt.show()\nprint('none')"), ANSWER]),
    "plt_tiny": (True, [code("import matplotlib.pyplot as plt\nplt.figure(figsize=(0.2, 2))\nplt.plot([1, 2])\n"
                             "plt.show()"), ANSWER]),
    "plt_unshown": (True, [code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('drawn')"),
                           code("import matplotlib.pyplot as plt\nprint(plt.get_fignums())"), ANSWER]),
    "pil_show": (True, [code("input_image.rotate(90).show()\nprint('shown')"), ANSWER]),
    "order": (True, [code(PLOT + "\ninput_image.show()\ninput_image.crop((0, 0, 64, 64))"), ANSWER]),
    # -- errors, and the namespace they take with them
    "name_error": (True, [code("x = 1\nprint('before')\nprint(y)"), code("print(x)"),
                          code("print(input_image.size)"), ANSWER]),
    "syntax_error": (True, [code("print('a'"), ANSWER]),
    "syntax_error_later_line": (True, [code("x = 1\ny = (\nprint(x)"), ANSWER]),
    "error_with_stderr": (True, [code("import sys\nsys.stderr.write('partial\\n')\n1 / 0"), ANSWER]),
    "error_after_figure": (True, [code(PLOT + "\nraise ValueError('late')"), ANSWER]),
    "alarm_blocked": (True, [code("import signal\nsignal.alarm(5)"), ANSWER]),
    "cv2_gui_disabled": (True, [code("import cv2\nimport numpy as np\ncv2.imshow('w', np.zeros((4, 4)))"), ANSWER]),
    "image_attribute_error": (True, [code("from PIL import ImageDraw\nImageDraw.Draw(input_image.copy())"),
                                     ANSWER]),
    "state_after_image": (True, [code("from PIL import Image\nsmall = input_image.resize((32, 32))\nsmall"),
                                 code("print(small.size)"), ANSWER]),
    "chdir_restored": (True, [code("import os\nos.chdir('/')\nprint(os.getcwd())"),
                              code("import os\nprint(sorted(os.listdir('.')))"), ANSWER]),
    # -- the turn: which text runs, which ends the rollout
    "two_fences_first_runs": (True, ["```python\nprint('first')\n```\nthen\n```python\nprint('second')\n```", ANSWER]),
    "bare_fence": (True, ["```python\nprint('bare')\n```", ANSWER]),
    "fence_without_newline": (True, ["```python print('x')```"]),
    "fence_not_python": (True, ["```py\nprint('x')\n```"]),
    "empty_fence": (True, ["```python\n   \n```"]),
    "answer_only": (True, [ANSWER]),
    "glm_call": (True, [glm(RUN, code="print('glm')"), ANSWER]),
    "glm_two_calls": (True, [glm(RUN, code="z = 5") + "\n" + glm(RUN, code="print(z * 2)"), ANSWER]),
    "glm_call_beside_fence": (True, [code("print('fence')") + "\n" + glm(RUN, code="print('call')"), ANSWER]),
    "glm_empty_code": (True, [glm(RUN, code=""), ANSWER]),
    "glm_no_code": (True, [glm(RUN), ANSWER]),
    "glm_unknown_function": (True, [glm("run_python", code="print(1)")]),
    "glm_timeout_argument": (True, [glm(RUN, code="import time\nwhile True:\n    time.sleep(0.1)", timeout=1),
                                    code("print('fresh')"), ANSWER]),
    "glm_timeout_with_output": (True, [glm(RUN, code="x = 7\nprint('started')\nwhile True:\n    pass", timeout=2),
                                       code("print('x' in globals())"), ANSWER]),
    "glm_timeout_swallowed": (True, [glm(RUN, code="import time\nwhile True:\n    try:\n        time.sleep(0.2)\n"
                                                   "    except Exception:\n        pass", timeout=1),
                                     code("print('after')"), ANSWER]),
    "qwen_json_call": (True, ['<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(1)"}}\n'
                              "</tool_call>"]),
    "glm_no_newline": (True, ["<tool_call>execute_python_code</tool_call>"]),
}
