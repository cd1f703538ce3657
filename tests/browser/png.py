"""A small PNG reader (standard library only) for screenshots: 8-bit RGB or RGBA, not interlaced.

``Image.read(path)`` -> ``image.pixel(x, y)`` = ``(r, g, b)``. Enough to look at what chromium drew.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PngError(ValueError):
    pass


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(kind, line, prev, bpp):
    if kind == 0:
        return bytearray(line)
    out = bytearray(line)
    n = len(out)
    if kind == 1:
        for i in range(bpp, n):
            out[i] = (out[i] + out[i - bpp]) & 0xFF
    elif kind == 2:
        out = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
    elif kind == 3:
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + ((left + prev[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            upleft = prev[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + _paeth(left, prev[i], upleft)) & 0xFF
    else:
        raise PngError(f"unknown PNG filter type {kind}")
    return out


class Image:
    def __init__(self, width, height, channels, rows):
        self.width, self.height, self.channels, self.rows = width, height, channels, rows

    @classmethod
    def read(cls, path):
        with open(path, "rb") as handle:
            data = handle.read()
        if not data.startswith(SIGNATURE):
            raise PngError(f"{path} is not a PNG file")
        pos, header, idat = len(SIGNATURE), None, []
        while pos + 8 <= len(data):
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            kind = data[pos + 4 : pos + 8]
            body = data[pos + 8 : pos + 8 + length]
            if kind == b"IHDR":
                header = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat.append(body)
            elif kind == b"IEND":
                break
            pos += 12 + length
        if header is None:
            raise PngError(f"{path} has no IHDR chunk")
        width, height, depth, colour, _compression, _filter, interlace = header
        if depth != 8 or colour not in (2, 6) or interlace:
            raise PngError(f"{path}: only 8-bit RGB/RGBA, not interlaced, is read (depth {depth}, colour type {colour}, interlace {interlace})")
        channels = 3 if colour == 2 else 4
        raw = zlib.decompress(b"".join(idat))
        stride = width * channels
        rows, prev = [], bytearray(stride)
        for y in range(height):
            start = y * (stride + 1)
            line = _unfilter(raw[start], raw[start + 1 : start + 1 + stride], prev, channels)
            rows.append(line)
            prev = line
        return cls(width, height, channels, rows)

    def pixel(self, x, y):
        i = x * self.channels
        row = self.rows[y]
        return row[i], row[i + 1], row[i + 2]

    def line(self, y, x0=0, x1=None):
        """The pixels ``(r, g, b)`` of row ``y`` from ``x0`` to ``x1`` (excluded)."""
        x1 = self.width if x1 is None else x1
        return [self.pixel(x, y) for x in range(max(0, x0), min(self.width, x1))]


def hex_rgb(colour):
    colour = colour.lstrip("#")
    return tuple(int(colour[i : i + 2], 16) for i in (0, 2, 4))


def near(pixel, rgb, tolerance=6):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb))
