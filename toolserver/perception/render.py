"""The picture OpenThinkIMG's `SegmentRegionAroundPoint` returns: matplotlib's default figure showing the image,
the mask in translucent blue with white smoothed contours, and each point as a green star; saved as PNG with a
tight box and a transparent background, then read back as RGB."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

MASK_COLOUR = np.array([30 / 255, 144 / 255, 255 / 255, 0.6])


def _mask_layer(mask: np.ndarray) -> np.ndarray:
    import cv2

    binary = mask.astype(np.uint8)
    height, width = binary.shape[-2:]
    layer = binary.reshape(height, width, 1) * MASK_COLOUR.reshape(1, 1, -1)
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    smoothed = [cv2.approxPolyDP(contour, epsilon=0.01, closed=True) for contour in contours]
    return cv2.drawContours(layer, smoothed, -1, (1, 1, 1, 0.5), thickness=2)


def segmented(image: Image.Image, mask: np.ndarray, points: list[tuple[float, float]]) -> Image.Image:
    # pyplot's default figure (6.4 x 4.8 in at 100 dpi), built without pyplot's global state: tools run in threads.
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.imshow(image)
    ax.imshow(_mask_layer(mask))
    coords = np.array(points, dtype=np.float64).reshape(-1, 2)
    ax.scatter(coords[:, 0], coords[:, 1], color="green", marker="*", s=375, edgecolor="white", linewidth=1.25)
    ax.axis("off")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", pad_inches=0, transparent=True)
    buffer.seek(0)
    with Image.open(buffer) as drawn:
        return drawn.convert("RGB")
