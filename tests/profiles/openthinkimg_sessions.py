"""The OpenThinkIMG sessions and cases that scripts/goldens/record_openthinkimg.py runs through the reference's own
code and tests/profiles/test_openthinkimg.py through toolserver: each session a photo, a question and the model's
turns, as its GRPO rollout reads them."""

from __future__ import annotations

import json

from PIL import Image

from tests.conftest import PHOTOS
from tests.profiles.helpers import translucent

TRANSLUCENT = "translucent"  # not a photo: helpers.translucent(), colour everywhere, alpha 0 on its left half


def act(name: str, arguments: dict | str, thought: str = "I will use a tool.") -> str:
    return json.dumps({"thought": thought, "actions": [{"name": name, "arguments": arguments}]})


TERMINATE = json.dumps({"thought": "Done.", "actions": [{"name": "Terminate", "arguments": {"ans": "42"}}]})

SESSIONS = [
    {"name": "lines", "photo": "Bridge_by_Sander_Klootwijk.jpg", "question": "How high is the bridge's deck?",
     "turns": [act("DrawHorizontalLineByY", {"image": "img_1", "param": 'x="21.5" y="28.5"'}),
               act("DrawVerticalLineByX", {"image": "img_2", "param": 'x="60" y="10"'}),
               TERMINATE]},
    {"name": "points", "photo": "Dragonfly_by_Bolly.jpg", "question": "Where are the wings?",
     "turns": [act("DrawHorizontalLineByY", {"image": "img_1", "param": "nothing to read"}),
               act("drawverticallinebyx", {"image": "img_1", "param": 'x1="10" y1="20" x2="45.5" y2="70" x3=150 y3=1'}),
               act("DrawHorizontalLineByY", {"image": "img_2", "param": 'x=150 y=100'}),
               act("DrawHorizontalLineByY", {"image": "img_2", "param": 'y="100"'}),
               TERMINATE]},
    {"name": "fallbacks", "photo": "LadyBird.jpg", "question": "How many spots does the ladybird have?",
     "turns": [act("ZoomInSubfigure", {"image": "img_1", "param": "the left plot"}),
               act("Zoom", {"image": "img_1", "param": "[0, 0, 10, 10]"}),
               act("DrawVerticalLineByX", {"image": "img_1"}),
               "I think the answer needs no tool.",
               '{"actions": [{"name": "OCR", "arguments": {"image": "img_1"}}, {"name": "Point"}]}',
               act("DrawVerticalLineByX", {"image": "img_1", "param": 50}),
               act("DrawVerticalLineByX", {"image": "img_1", "param": None}),
               act("DrawVerticalLineByX", "draw an image line"),
               'Terminate: 7']},
    {"name": "tall", "photo": "Altai_1080x1920.png", "question": "What is in the valley?",
     "turns": [act("DrawVerticalLineByX", {"image": "img_1", "param": 'x="33.3" y="50"'}),
               act("DrawHorizontalLineByY", {"image": "img_9", "param": 'x="1" y="99.9" x2="5" y2="0"'}),
               act("ZoomInSubfigure", {"image": "img_2", "param": "valley"})]},
    {"name": "alpha", "photo": TRANSLUCENT, "question": "What colour is the left half?",
     "turns": [act("DrawHorizontalLineByY", {"image": "img_1", "param": 'x="10" y="50"'}),
               act("Crop", {"image": "img_2", "param": "[0, 0, 10, 10]"}),  # not the listed crop
               act("DrawVerticalLineByX", {"image": "img_2", "param": "nothing"})]},
]

def session_image(photo: str) -> Image.Image:
    """A session's input as the rollout is handed it (before its own RGB conversion)."""
    if photo == TRANSLUCENT:
        return translucent()
    with Image.open(PHOTOS / photo) as image:
        image.load()
        return image.copy()


# `crop` (the tool manager's offline worker; the rollout's name mapping leaves it out): params on one photo.
CROP_PHOTO = "TwoWings.jpg"
CROPS = ["[10, 20, 300, 200]", "[ 0 , 0 , 64 , 48 ]", "[10,20,300]", "[300, 20, 10, 200]", "[-5, 0, 10, 10]",
         "[0, 0, 0, 10]", "[100, 100, 2400, 1900]", "[1,,2,3]", "crop [1, 2, 3, 4]", "[1, 2, 3, 4] please", 5, None]

# The points a drawing worker reads from `param` (`extract_points`), on a 640x480 image.
POINT_PARAMS = ['x="21.5" y="28.5"', "x=10 y=20", 'x1="1" y1="2" x2="3" y2="4"', 'y="50"', 'x="50"',
                "x=101 y=5", "x2=5 y2=6 x=7 y=8", 'x = " 12.5" y= 3', "x1=5 y3=9", "no points", "a=5 b=6",
                'x="0.5" y="100"', "xy=4 yx=5"]
