"""Calibration data for the PP-OCR text-direction classifier: real rendered text
lines (upright and upside down), preprocessed the way rapidocr's classifier does
(resize to height 48 keeping the aspect ratio, scale to [-1, 1], pad to 192).

No data is downloaded: lines are rendered with Pillow's built-in font.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

WORDS = ("invoice total amount paid receipt order number customer address street city "
         "phone date time quantity price tax discount balance account reference item "
         "shipping delivery signature thank you visit again store manager cash card").split()
H, W = 48, 192


def _render(rng: random.Random) -> Image.Image:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.3:
        text += f" {rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
    font = ImageFont.load_default(size=rng.randint(22, 34))
    left, top, right, bottom = font.getbbox(text)
    pad = rng.randint(2, 8)
    img = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad),
                    tuple(rng.randint(200, 255) for _ in range(3)))
    ink = tuple(rng.randint(0, 70) for _ in range(3))
    ImageDraw.Draw(img).text((pad - left, pad - top), text, font=font, fill=ink)
    if rng.random() < 0.5:
        img = img.rotate(180)
    # Scanned, not typeset: a little blur and sensor noise.
    img = img.filter(ImageFilter.GaussianBlur(radius=rng.uniform(0.0, 1.5)))
    noise = np.random.default_rng(rng.randrange(1 << 30)).normal(0, rng.uniform(2, 14),
                                                                 (img.size[1], img.size[0], 3))
    arr = np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(arr)


def _preprocess(img: Image.Image) -> np.ndarray:
    w, h = img.size
    rw = min(W, math.ceil(H * w / h))
    arr = np.asarray(img.resize((rw, H), Image.BILINEAR), dtype=np.float32)
    arr = (arr.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    out = np.zeros((3, H, W), dtype=np.float32)
    out[:, :, :rw] = arr
    return out[np.newaxis]


def text_lines(count: int) -> Iterator[dict[str, np.ndarray]]:
    """``count`` classifier inputs {"x": float32[1, 3, 48, 192]}, deterministic."""
    rng = random.Random(6490)
    for _ in range(count):
        yield {"x": _preprocess(_render(rng))}


DET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def text_pages(count: int, height: int = 96, width: int = 256,
               seed: int = 7) -> Iterator[dict[str, np.ndarray]]:
    """``count`` detector inputs {"x": float32[1, 3, height, width]}: a light page with
    two rendered text lines, normalised the way rapidocr's detector does (ImageNet
    mean and std); deterministic for a seed."""
    rng = random.Random(seed)
    for _ in range(count):
        page = Image.new("RGB", (width, height), (235, 235, 230))
        for k in range(2):
            line = _render(rng)
            line.thumbnail((width - 10, height // 2 - 4))
            page.paste(line, (rng.randint(0, 8), 4 + k * (height // 2)))
        arr = (np.asarray(page, dtype=np.float32) / 255.0 - DET_MEAN) / DET_STD
        yield {"x": arr.transpose(2, 0, 1)[np.newaxis].astype(np.float32)}
