"""Bench shapes as data: the ``BenchShape`` record, the JSON layer files and their loader.

A layer file is a JSON list of objects, one per layer::

    [{"name": "videomae_tube", "batch": 1, "channels": [3, 768], "input": [16, 224, 224],
      "kernel": [2, 16, 16], "stride": [2, 16, 16], "padding": 0, "dilation": 1,
      "dtype": "bf16", "lnc": 1, "source": "VideoMAE ViT-B tubelet embedding"}]

Required: ``name`` (unique in the file), ``batch``, ``channels`` ([C_in, C_out]), ``input`` ([D, H, W]),
``kernel`` (one integer or [K_d, K_h, K_w]). Optional: ``stride`` and ``dilation`` (one integer or three,
default 1), ``padding`` (one integer, three per-axis symmetric values, or six
[d_lo, d_hi, h_lo, h_hi, w_lo, w_hi]; default 0), ``dtype`` (bf16 | fp16 | fp32, default bf16), ``lnc``
(1 or 2: that layer's LNC degree; absent: the bench's ``--lnc``), ``source`` (free text: where the layer
comes from). A bad file raises ``ShapeFileError`` naming the file, the layer and the field and its rule.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conv3d_bwd.reference.geometry import ConvGeometry, GeometryError

SHAPE_SETS_DIR = Path(__file__).with_name("shape_sets")
FILE_DTYPES = ("bf16", "fp16", "fp32")
REQUIRED_KEYS = ("name", "batch", "channels", "input", "kernel")
OPTIONAL_KEYS = ("stride", "padding", "dilation", "dtype", "lnc", "source")


class ShapeFileError(ValueError):
    """A bad layer file: names the file, the layer (index and name), the field and the rule."""


@dataclass(frozen=True)
class BenchShape:
    """One bench geometry (all three gradients are computed); ``lnc`` None: the bench's LNC degree."""

    name: str
    batch: int
    c_in: int
    c_out: int
    input: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, ...] = (0,) * 6
    dilation: tuple[int, int, int] = (1, 1, 1)
    dtype: str = "bf16"
    lnc: int | None = None
    source: str = ""

    @property
    def geometry(self) -> ConvGeometry:
        return ConvGeometry(batch=self.batch, c_in=self.c_in, c_out=self.c_out, in_size=self.input,
                            kernel=self.kernel, stride=self.stride, padding=self.padding,
                            dilation=self.dilation)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(where: str, key: str, value: object, lengths: Sequence[int], minimum: int, rule: str) -> tuple[int, ...]:
    """``value`` as a tuple of integers >= ``minimum``: one integer, or a list of one of ``lengths``."""
    items = [value] if _is_int(value) else value
    if not isinstance(items, list) or len(items) not in lengths or not all(_is_int(v) for v in items):
        raise ShapeFileError(f"{where}: field {key!r}={value!r}: must be {rule}")
    if any(v < minimum for v in items):
        raise ShapeFileError(f"{where}: field {key!r}={value!r}: every value must be >= {minimum}")
    return tuple(items)


def _triple(where: str, key: str, value: object, minimum: int) -> tuple[int, int, int]:
    t = _ints(where, key, value, (1, 3), minimum, "an integer or a list of 3 integers [D, H, W]")
    return (t * 3 if len(t) == 1 else t)  # type: ignore[return-value]


def _padding(where: str, value: object) -> tuple[int, ...]:
    t = _ints(where, "padding", value, (1, 3, 6), 0,
              "an integer, 3 per-axis integers, or 6 integers [d_lo, d_hi, h_lo, h_hi, w_lo, w_hi]")
    if len(t) == 1:
        return t * 6
    if len(t) == 3:
        return (t[0], t[0], t[1], t[1], t[2], t[2])
    return t


def shape_from_dict(entry: object, where: str) -> BenchShape:
    """One layer of a file (``where`` names it in errors), validated field by field and as a geometry."""
    if not isinstance(entry, dict):
        raise ShapeFileError(f"{where}: must be a JSON object with the fields {', '.join(REQUIRED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        raise ShapeFileError(f"{where}: missing required field(s) {', '.join(missing)}")
    unknown = sorted(set(entry) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise ShapeFileError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: "
                             f"{', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    name = entry["name"]
    if not isinstance(name, str) or not name.strip():
        raise ShapeFileError(f"{where}: field 'name'={name!r}: must be a non-empty string")
    where = f"{where} ({name})"
    batch = _ints(where, "batch", entry["batch"], (1,), 1, "an integer >= 1")[0]
    c_in, c_out = _ints(where, "channels", entry["channels"], (2,), 1, "a list of 2 integers [C_in, C_out]")
    size = _ints(where, "input", entry["input"], (3,), 1, "a list of 3 integers [D, H, W]")
    dtype = entry.get("dtype", "bf16")
    if dtype not in FILE_DTYPES:
        raise ShapeFileError(f"{where}: field 'dtype'={dtype!r}: must be one of {', '.join(FILE_DTYPES)}")
    lnc = entry.get("lnc")
    if lnc is not None and (not _is_int(lnc) or lnc not in (1, 2)):
        raise ShapeFileError(f"{where}: field 'lnc'={lnc!r}: must be 1 or 2")
    source = entry.get("source", "")
    if not isinstance(source, str):
        raise ShapeFileError(f"{where}: field 'source'={source!r}: must be a string")
    shape = BenchShape(name=name, batch=batch, c_in=c_in, c_out=c_out, input=size,  # type: ignore[arg-type]
                       kernel=_triple(where, "kernel", entry["kernel"], 1),
                       stride=_triple(where, "stride", entry.get("stride", 1), 1),
                       padding=_padding(where, entry.get("padding", 0)),
                       dilation=_triple(where, "dilation", entry.get("dilation", 1), 1),
                       dtype=dtype, lnc=lnc, source=source)
    try:
        shape.geometry   # noqa: B018 -- builds (validates) the geometry: output sizes >= 1, padding < kernel
    except GeometryError as exc:
        raise ShapeFileError(f"{where}: not a valid convolution: {exc}") from None
    return shape


def shapes_from_json(data: object, origin: str) -> tuple[BenchShape, ...]:
    """The layers of a parsed layer file (``origin`` names it in errors)."""
    if not isinstance(data, list) or not data:
        raise ShapeFileError(f"{origin}: must be a non-empty JSON list of layer objects")
    shapes = tuple(shape_from_dict(e, f"{origin}: layer {i}") for i, e in enumerate(data))
    seen: set[str] = set()
    for i, s in enumerate(shapes):
        if s.name in seen:
            raise ShapeFileError(f"{origin}: layer {i}: field 'name'={s.name!r}: names must be unique in a file")
        seen.add(s.name)
    return shapes


def load_shapes(path: str | Path) -> tuple[BenchShape, ...]:
    """The layers of the JSON layer file at ``path`` (see the module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ShapeFileError(f"shapes={str(p)!r}: cannot read the file ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShapeFileError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return shapes_from_json(data, str(p))


def realworld_shapes() -> tuple[BenchShape, ...]:
    """The ``realworld`` set: twelve layers of published 3D-conv networks (bf16; sources in the file)."""
    return load_shapes(SHAPE_SETS_DIR / "realworld.json")
