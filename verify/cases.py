"""The named case matrix: one frozen ``Case`` per geometry, grouped, with readable ids.

Groups: basic, strides, dilations, paddings, kernels, channels, batches, lnc2,
dtypes, grads, layers. Spatial sizes stay small so each case runs in seconds under the numpy-eager
emulator. ``fast=True`` marks a quick subset that covers every group at least once.

``CASE_SETS``: "fast" (the fast subset), "default" (every group), "full" (default plus bigger and
cross-dtype variants).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

DTYPES = ("bf16", "fp16", "fp32")
GRADS = ("dx", "dw", "db")
GRAD_SUBSETS: tuple[tuple[str, ...], ...] = tuple(
    subset for r in (1, 2, 3) for subset in itertools.combinations(GRADS, r))


class CaseError(ValueError):
    """A case field that breaks a rule (names the field, the value and the rule)."""


def _triple(name: str, value: Sequence[int], minimum: int) -> tuple[int, int, int]:
    values = tuple(value)
    if len(values) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise CaseError(f"{name}: {value!r} must be three integers")
    if any(v < minimum for v in values):
        raise CaseError(f"{name}: {value!r} must have every entry >= {minimum}")
    return values  # type: ignore[return-value]


def _digits(values: Sequence[int]) -> str:
    # Compact "111" when every value is one digit, "10.2.3" otherwise, so ids stay unambiguous.
    return "".join(map(str, values)) if all(0 <= v < 10 for v in values) else ".".join(map(str, values))


@dataclass(frozen=True)
class Case:
    """One conv3d_bwd geometry to verify. Layouts as in the kernel: dy [B, C_out, *out], x [B, C_in,
    *input], filters [*kernel, C_in, C_out]; padding is (d_lo, d_hi, h_lo, h_hi, w_lo, w_hi)."""

    name: str
    group: str
    batch: int
    c_in: int
    c_out: int
    input: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, ...] = (0,) * 6
    dilation: tuple[int, int, int] = (1, 1, 1)
    dtype: str = "bf16"
    grads: tuple[str, ...] = GRADS
    lnc: int = 1
    fast: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("batch", "c_in", "c_out"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CaseError(f"{name}: {value!r} must be an integer >= 1")
        object.__setattr__(self, "input", _triple("input", self.input, 1))
        object.__setattr__(self, "kernel", _triple("kernel", self.kernel, 1))
        object.__setattr__(self, "stride", _triple("stride", self.stride, 1))
        object.__setattr__(self, "dilation", _triple("dilation", self.dilation, 1))
        padding = tuple(self.padding)
        if len(padding) != 6 or not all(isinstance(p, int) and p >= 0 for p in padding):
            raise CaseError(f"padding: {self.padding!r} must be six integers >= 0 "
                            "(d_lo, d_hi, h_lo, h_hi, w_lo, w_hi)")
        object.__setattr__(self, "padding", padding)
        if self.dtype not in DTYPES:
            raise CaseError(f"dtype: {self.dtype!r} is not one of {', '.join(DTYPES)}")
        grads = tuple(self.grads)
        if not grads or any(g not in GRADS for g in grads) or len(set(grads)) != len(grads):
            raise CaseError(f"grads: {self.grads!r} must be a non-empty subset of dx, dw, db")
        object.__setattr__(self, "grads", tuple(g for g in GRADS if g in grads))
        if self.lnc not in (1, 2):
            raise CaseError(f"lnc: {self.lnc!r} must be 1 or 2")
        for axis, size in enumerate(self.out_size_unchecked):
            if size < 1:
                raise CaseError(
                    f"input/kernel/padding/dilation/stride: axis {'DHW'[axis]} has output size "
                    f"{size}; the rule is (n + p_lo + p_hi - dil*(k-1) - 1) // stride + 1 >= 1")

    @property
    def out_size_unchecked(self) -> tuple[int, int, int]:
        return tuple(
            (n + self.padding[2 * a] + self.padding[2 * a + 1] - r * (k - 1) - 1) // s + 1
            for a, (n, k, s, r) in enumerate(zip(self.input, self.kernel, self.stride, self.dilation))
        )  # type: ignore[return-value]

    @property
    def out_size(self) -> tuple[int, int, int]:
        return self.out_size_unchecked

    @property
    def id(self) -> str:
        """Readable and unique: name, then every geometry field."""
        return f"{self.name}-{self.geometry_id}"

    @property
    def geometry_id(self) -> str:
        """Every field but the name and group: what the inputs depend on (``verify.inputs``), so
        that ``conv3d-bwd check`` with a case's flags reproduces that case's data exactly."""
        return "-".join([
            f"b{self.batch}", f"ci{self.c_in}", f"co{self.c_out}",
            "x".join(map(str, self.input)), "k" + _digits(self.kernel), "s" + _digits(self.stride),
            "p" + _digits(self.padding), "d" + _digits(self.dilation), self.dtype,
            "".join(self.grads), f"lnc{self.lnc}",
        ])

    @property
    def dy_shape(self) -> tuple[int, ...]:
        return (self.batch, self.c_out, *self.out_size)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.batch, self.c_in, *self.input)

    @property
    def w_shape(self) -> tuple[int, ...]:
        return (*self.kernel, self.c_in, self.c_out)

    @property
    def grad_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"dx": self.x_shape, "dw": self.w_shape, "db": (self.c_out,)}

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.kernel[2]

    @property
    def positions(self) -> int:
        d, h, w = self.out_size
        return d * h * w

    def k_nominal(self) -> dict[str, int]:
        """Structural accumulation length per gradient (before padding and stride holes)."""
        return {"dx": self.c_out * self.taps, "dw": self.batch * self.positions,
                "db": self.batch * self.positions}

    def macs(self) -> int:
        """Multiply-accumulates of dx plus dw: a cost proxy for scheduling."""
        per_grad = self.batch * self.c_in * self.c_out * self.positions * self.taps
        return per_grad * sum(g in self.grads for g in ("dx", "dw")) + self.batch * self.positions

    def geometry(self):
        """The oracle's ConvGeometry (validated: raises reference.GeometryError)."""
        from conv3d_bwd.reference import ConvGeometry

        return ConvGeometry(batch=self.batch, c_in=self.c_in, c_out=self.c_out, in_size=self.input,
                            kernel=self.kernel, stride=self.stride, padding=self.padding,
                            dilation=self.dilation)

    def kernel_kwargs(self) -> dict:
        """Keyword arguments of conv3d_bwd for this case (after dy, x_in, filters)."""
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation,
                "compute_dx": "dx" in self.grads, "compute_dw": "dw" in self.grads,
                "compute_db": "db" in self.grads}

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "group": self.group, "batch": self.batch,
                "c_in": self.c_in, "c_out": self.c_out, "input": list(self.input),
                "kernel": list(self.kernel), "stride": list(self.stride),
                "padding": list(self.padding), "dilation": list(self.dilation),
                "out_size": list(self.out_size), "dtype": self.dtype, "grads": list(self.grads),
                "lnc": self.lnc, "fast": self.fast}


def case_from_args(batch: int, channels: Sequence[int], input: Sequence[int], kernel: Sequence[int],
                   stride: Sequence[int] = (1, 1, 1), padding: Sequence[int] = (0,) * 6,
                   dilation: Sequence[int] = (1, 1, 1), dtype: str = "bf16",
                   grads: Sequence[str] = GRADS, lnc: int = 1, name: str = "cli",
                   group: str = "cli") -> Case:
    """A Case from command-line style values; channels is (C_in, C_out)."""
    channels = tuple(channels)
    if len(channels) != 2:
        raise CaseError(f"channels: {channels!r} must be two integers C_IN,C_OUT")
    return Case(name=name, group=group, batch=batch, c_in=channels[0], c_out=channels[1],
                input=tuple(input), kernel=tuple(kernel), stride=tuple(stride),
                padding=tuple(padding), dilation=tuple(dilation), dtype=dtype, grads=tuple(grads),
                lnc=lnc)


def _c(name: str, group: str, b: int, ci: int, co: int, inp, k, s=(1, 1, 1), p=(0,) * 6,
       d=(1, 1, 1), dtype: str = "bf16", grads=GRADS, lnc: int = 1, fast: bool = False) -> Case:
    return Case(name, group, b, ci, co, tuple(inp), tuple(k), tuple(s), tuple(p), tuple(d), dtype,
                tuple(grads), lnc, fast)


def _same(k: Sequence[int], d: Sequence[int] = (1, 1, 1)) -> tuple[int, ...]:
    """Symmetric 'same' padding per axis: dil*(k-1)//2 on each side (odd k)."""
    return tuple(v for kk, dd in zip(k, d) for v in (dd * (kk - 1) // 2, dd * (kk - 1) - dd * (kk - 1) // 2))


K3 = (3, 3, 3)
P1 = (1,) * 6


def _basic() -> list[Case]:
    return [
        _c("basic", "basic", 2, 8, 8, (4, 6, 6), K3, p=P1, fast=True),
        _c("basic_nopad", "basic", 1, 8, 16, (4, 6, 6), K3),
        _c("basic_k1", "basic", 2, 16, 8, (3, 5, 5), (1, 1, 1)),
    ]


def _strides() -> list[Case]:
    strides = [((2, 2, 2), True), ((1, 2, 2), False), ((2, 1, 1), False), ((3, 3, 3), False),
               ((4, 4, 4), False), ((1, 3, 4), False), ((4, 2, 1), False), ((2, 3, 1), False)]
    return [_c("stride", "strides", 1, 8, 8, (7, 9, 9), K3, s=s, p=P1, fast=fast)
            for s, fast in strides] + [
        _c("stride_k1", "strides", 1, 8, 8, (5, 6, 6), (1, 1, 1), s=(2, 2, 2)),
        _c("stride_k2", "strides", 1, 8, 8, (6, 8, 8), (2, 2, 2), s=(2, 2, 2)),
    ]


def _dilations() -> list[Case]:
    dils = [((2, 2, 2), True), ((3, 3, 3), False), ((1, 2, 3), False), ((3, 1, 2), False)]
    cases = [_c("dil", "dilations", 1, 8, 8, (6, 8, 8), K3, p=_same(K3, d), d=d, fast=fast)
             for d, fast in dils]
    cases.append(_c("dil_nopad", "dilations", 1, 8, 8, (6, 8, 8), K3, d=(2, 2, 2)))
    cases.append(_c("dil_stride", "dilations", 1, 8, 8, (7, 9, 9), K3, s=(2, 2, 2), p=(2,) * 6,
                    d=(2, 2, 2)))
    return cases


def _paddings() -> list[Case]:
    pads = [((0, 2, 1, 0, 2, 1), True), ((2, 0, 0, 2, 1, 1), False), ((0, 1, 2, 0, 0, 2), False),
            ((2, 2, 0, 0, 2, 2), False), ((0, 0, 0, 1, 1, 0), False)]
    cases = [_c("pad", "paddings", 1, 8, 8, (4, 6, 6), K3, p=p, fast=fast) for p, fast in pads]
    cases.append(_c("pad_dil", "paddings", 1, 8, 8, (6, 8, 8), K3, p=(4, 0, 3, 1, 0, 4), d=(2, 2, 2)))
    cases.append(_c("pad_stride", "paddings", 1, 8, 8, (6, 8, 8), K3, s=(2, 2, 2),
                    p=(0, 2, 2, 1, 1, 0)))
    cases.append(_c("pad_k1", "paddings", 1, 64, 64, (5, 6, 6), (1, 1, 1), p=(1,) * 6))   # dw:tap_gemm
    return cases


def _kernels() -> list[Case]:
    kernels = [((7, 7, 7), False), ((3, 1, 1), True), ((1, 7, 7), False), ((1, 1, 3), False),
               ((5, 3, 3), False), ((1, 1, 1), False), ((2, 3, 4), False)]
    cases = [_c("kern", "kernels", 1, 4, 8, (8, 8, 8), k, p=_same(k), fast=fast) for k, fast in kernels]
    cases.append(_c("kern7_nopad", "kernels", 1, 4, 4, (8, 9, 9), (7, 7, 7)))
    return cases


def _channels() -> list[Case]:
    pairs = [((1, 8), True), ((8, 1), False), ((63, 65), False), ((64, 64), False), ((65, 63), False),
             ((127, 129), False), ((128, 128), False), ((129, 127), True), ((256, 8), False),
             ((8, 256), True), ((513, 16), False), ((16, 513), False)]
    cases = [_c("chan", "channels", 1, ci, co, (2, 4, 4), K3, p=P1, fast=fast) for (ci, co), fast in pairs]
    cases.append(_c("chan_k1", "channels", 1, 513, 129, (2, 3, 3), (1, 1, 1)))
    # Both channel axes and the position axis cross a 128 tile at once.
    cases.append(_c("chan_tiles", "channels", 1, 129, 129, (3, 8, 8), K3, p=P1))
    return cases


def _batches() -> list[Case]:
    return [
        _c("batch", "batches", 1, 8, 8, (4, 6, 6), K3, p=P1),
        _c("batch", "batches", 3, 8, 8, (3, 5, 5), K3, p=P1, fast=True),
        _c("batch", "batches", 8, 4, 8, (2, 4, 4), K3, p=P1),
        _c("batch_s2", "batches", 5, 8, 8, (4, 7, 7), K3, s=(1, 2, 2), p=P1),
    ]


def _lnc2() -> list[Case]:
    return [
        _c("lnc2", "lnc2", 2, 8, 8, (4, 6, 6), K3, p=P1, lnc=2, fast=True),
        _c("lnc2_stride", "lnc2", 1, 8, 16, (7, 9, 9), K3, s=(2, 2, 2), p=P1, lnc=2),
        _c("lnc2_chan", "lnc2", 1, 129, 65, (2, 4, 4), K3, p=P1, lnc=2),
        _c("lnc2_dw", "lnc2", 3, 8, 8, (3, 5, 5), K3, p=P1, grads=("dw", "db"), lnc=2),
        _c("lnc2_tubelet", "lnc2", 1, 3, 64, (4, 32, 32), (2, 16, 16), s=(2, 16, 16), lnc=2),
    ]


def _dtypes() -> list[Case]:
    cases = [_c("dtype", "dtypes", 2, 8, 8, (4, 6, 6), K3, p=P1, dtype=dt, fast=dt != "bf16")
             for dt in DTYPES]
    cases += [_c("dtype_stride", "dtypes", 1, 8, 8, (7, 9, 9), K3, s=(2, 2, 2), p=P1, dtype=dt)
              for dt in ("fp16", "fp32")]
    cases.append(_c("dtype_chan", "dtypes", 1, 129, 65, (2, 4, 4), K3, p=P1, dtype="fp32"))
    cases.append(_c("dtype_stride", "dtypes", 2, 8, 8, (7, 9, 9), K3, s=(2, 2, 2), p=P1, dtype="fp32"))  # dw:tap_pack
    # The planner's choice depends on the dtype: these make it pick, in fp16 and fp32 too, every
    # method some default geometry would get in that dtype (simtests/verify/test_cases.py checks
    # it), so the fp32 accumulation of each method is measured, not only its bf16 rounding.
    for dt in ("fp16", "fp32"):
        cases += [
            _c("dtype_k1", "dtypes", 1, 4, 8, (8, 8, 8), (1, 1, 1), dtype=dt),             # *:gemm
            _c("dtype_k1_s2", "dtypes", 1, 8, 8, (5, 6, 6), (1, 1, 1), s=(2, 2, 2), dtype=dt),
            _c("dtype_pad_k1", "dtypes", 1, 64, 64, (5, 6, 6), (1, 1, 1), p=(1,) * 6, dtype=dt),  # dw:tap_gemm
        ]
    cases += [
        _c("dtype_k113", "dtypes", 1, 4, 8, (8, 8, 8), (1, 1, 3), p=(0, 0, 0, 0, 1, 1), dtype="fp16"),
        _c("dtype_dil", "dtypes", 1, 8, 8, (6, 8, 8), K3, p=(2,) * 6, d=(2, 2, 2), dtype="fp16"),  # row_pack
        _c("dtype_k7", "dtypes", 1, 4, 4, (8, 9, 9), (7, 7, 7), dtype="fp32"),             # row_pack
        _c("dtype_k7", "dtypes", 1, 4, 4, (8, 9, 9), (7, 7, 7), dtype="fp16"),             # dx:toeplitz
    ]
    cases += [_c("dtype_tubelet", "dtypes", 1, 3, 64, (4, 32, 32), (2, 16, 16), s=(2, 16, 16), dtype=dt)
              for dt in ("fp16", "fp32")]                                                  # *:s2d_gemm
    cases.append(_c("dtype_nnunet", "dtypes", 1, 32, 32, (16, 64, 8), K3, p=P1, dtype="fp16"))   # dw:kd_moving
    cases.append(_c("dtype_vae", "dtypes", 1, 32, 32, (4, 8, 8), K3, p=(2, 0, 1, 1, 1, 1),
                    dtype="fp16"))                                                 # dw:small_extent
    cases += [_c("dtype_db", "dtypes", 2, 8, 8, (5, 6, 6), K3, s=(2, 1, 1), p=P1, grads=("db",), dtype=dt)
              for dt in ("fp16", "fp32")]                                                  # db:standalone
    return cases


def _grads() -> list[Case]:
    return [_c("grads", "grads", 2, 8, 8, (5, 6, 6), K3, s=(2, 1, 1), p=P1, grads=g, fast=len(g) == 1)
            for g in GRAD_SUBSETS]


def _layers() -> list[Case]:
    return [
        # Video VAE: 3x3x3 with causal temporal padding (2 before, 0 after).
        _c("vae", "layers", 1, 32, 32, (4, 8, 8), K3, p=(2, 0, 1, 1, 1, 1), fast=True),
        # 1024 output positions: crosses the 512-wide moving tile and many 128-position dw tiles.
        _c("vae_wide", "layers", 1, 32, 32, (4, 16, 16), K3, p=(2, 0, 1, 1, 1, 1)),
        _c("vae_up", "layers", 1, 64, 32, (3, 8, 8), K3, p=(2, 0, 1, 1, 1, 1)),
        # 3D U-Net encoder block: 3x3x3, same padding, channels doubling.
        _c("unet", "layers", 2, 16, 32, (4, 8, 8), K3, p=P1),
        _c("unet_down", "layers", 1, 32, 64, (4, 8, 8), K3, s=(2, 2, 2), p=P1),
        # Strided video stem: RGB in, k=3x7x7, stride (1,2,2).
        _c("stem", "layers", 1, 3, 32, (4, 16, 16), (3, 7, 7), s=(1, 2, 2), p=(1, 1, 3, 3, 3, 3)),
        # Video tubelet embedding (VideoMAE-style): stride = kernel, no padding (the s2d_gemm class).
        _c("tubelet", "layers", 1, 3, 64, (4, 32, 32), (2, 16, 16), s=(2, 16, 16)),
        # nnU-Net stage 0 (32 -> 32, same padding) on a smaller volume: small channels whose dw runs
        # with K_d x C_out on the moving axis (the dw:kd_moving class).
        _c("nnunet", "layers", 1, 32, 32, (16, 64, 8), K3, p=P1),
    ]


def _bigger() -> list[Case]:
    """Only in the full set: real channel counts and larger spatial sizes."""
    return [
        _c("vae_c128", "layers", 1, 128, 128, (4, 16, 16), K3, p=(2, 0, 1, 1, 1, 1)),
        _c("unet_c64", "layers", 2, 64, 64, (8, 16, 16), K3, p=P1),
        _c("stem_c64", "layers", 1, 3, 64, (8, 32, 32), (3, 7, 7), s=(1, 2, 2), p=(1, 1, 3, 3, 3, 3)),
        _c("chan_big", "channels", 1, 513, 257, (2, 6, 6), K3, p=P1),
        _c("batch_big", "batches", 8, 16, 16, (4, 8, 8), K3, p=P1),
        _c("kern7_big", "kernels", 1, 16, 16, (8, 12, 12), (7, 7, 7), p=(3,) * 6),
    ]


def _all_groups() -> list[Case]:
    return (_basic() + _strides() + _dilations() + _paddings() + _kernels() + _channels()
            + _batches() + _lnc2() + _dtypes() + _grads() + _layers())


def _dtype_variants(cases: Iterable[Case], groups: set[str]) -> list[Case]:
    return [replace(c, dtype=dt, fast=False) for c in cases if c.group in groups
            for dt in DTYPES if dt != c.dtype]


def _unique(cases: Iterable[Case]) -> tuple[Case, ...]:
    seen: dict[str, Case] = {}
    for case in cases:
        seen.setdefault(case.id, case)
    return tuple(seen.values())


def _build_sets() -> dict[str, tuple[Case, ...]]:
    default = _unique(_all_groups())
    fast = tuple(c for c in default if c.fast)
    full = _unique([*default, *_bigger(),
                    *_dtype_variants(default, {"strides", "dilations", "paddings", "kernels"})])
    return {"fast": fast, "default": default, "full": full}


CASE_SETS: dict[str, tuple[Case, ...]] = _build_sets()
GROUPS: tuple[str, ...] = ("basic", "strides", "dilations", "paddings", "kernels", "channels",
                           "batches", "lnc2", "dtypes", "grads", "layers")


def get_case(case_id: str) -> Case:
    """The case of any set with this id (KeyError naming the id otherwise)."""
    for case in CASE_SETS["full"]:
        if case.id == case_id:
            return case
    raise KeyError(f"case id {case_id!r} is in no case set")
