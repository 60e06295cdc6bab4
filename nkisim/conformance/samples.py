"""Specs for aws-neuron/nki-samples kernels: small shapes, their references and their tolerances.

Paths are relative to an nki-samples checkout. Where a tutorial computes its reference inline (in
``__main__`` or a ``check_correct`` function), ``LocalReference`` restates that computation and
says which one; where the checkout defines a reference function, ``FileReference`` names it.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .spec import Case, FileReference, Generation, KernelSpec, LocalReference

T = "src/nki_samples/tutorials"
C = "contributed"
LEGACY = Generation.legacy
CURRENT = Generation.current


def _f32(rng: np.random.Generator, *shape: int, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    return (lo + (hi - lo) * rng.random(shape)).astype(np.float32)


def _bf16(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.random(shape).astype(ml_dtypes.bfloat16)


# --- references the tutorials compute inline -------------------------------------------------------
def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) + b.astype(np.float32)


def _transpose2d(a: np.ndarray, shape2d: tuple[int, int]) -> np.ndarray:
    x, y = shape2d
    return np.transpose(a.reshape(a.shape[0], x, y), (0, 2, 1)).reshape(a.shape[0], x * y)


def _matmul_t(lhs_t: np.ndarray, rhs: np.ndarray, **_: int) -> np.ndarray:
    return lhs_t.astype(np.float32).T @ rhs.astype(np.float32)


def _max_pool(x: np.ndarray, pool_size: int) -> np.ndarray:
    import torch

    return torch.nn.functional.max_pool2d(torch.from_numpy(x)[None, None], pool_size, 1)[0, 0].numpy()


def _interpolate(mode: str):
    def ref(x: np.ndarray) -> np.ndarray:
        import torch

        return torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=2, mode=mode).numpy()
    return ref


# --- inputs at small shapes ------------------------------------------------------------------------
def _add_inputs(rng, module=None):
    return Case((_f32(rng, 256, 1024).astype(np.float16), _f32(rng, 256, 1024).astype(np.float16)))


def _transpose_inputs(rng, module=None):
    return Case((np.arange(5 * 3 * 4, dtype=np.int8).reshape(5, 12), (3, 4)))


def _avgpool_inputs(rng, module=None):
    return Case((np.arange(2 * 6 * 6, dtype=np.float16).reshape(2, 6, 6), 2))


def _mamba_inputs(rng, module=None):
    b, ch, sl, ss = 1, 128, 512, 2
    delta = _f32(rng, b, ch, sl, hi=0.1)
    u = _f32(rng, b, ch, sl)
    a = -_f32(rng, ch, ss)
    bb = _f32(rng, b, ss, sl)
    cc = _f32(rng, b, ss, sl)
    # mamba_torch.mamba_layer(delta, A, B, u, C): another argument order than the kernel's
    return Case((delta, u, a, bb, cc), ref_args=(delta, a, bb, u, cc))


def _attention_inputs(seqlen: int):
    def make(rng, module=None):
        return Case(tuple(_f32(rng, 128, seqlen, lo=-1.0, hi=1.0) for _ in range(3)))
    return make


def _matmul_inputs(k: int, m: int, n: int, **meta: int):
    def make(rng, module=None):
        return Case((_bf16(rng, k, m), _bf16(rng, k, n)), dict(meta), ref_kwargs={})
    return make


def _contrib_matmul_inputs(rng, module=None):
    return Case((_f32(rng, 256, 256).astype(np.float16), _f32(rng, 256, 1024).astype(np.float16)),
                {"TILES_IN_BLOCK_K": 2, "TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2})


def _maxpool_inputs(rng, module=None):
    return Case((_f32(rng, 200, 40), 3))


def _bilinear_inputs(rng, module=None):
    return Case((_f32(rng, 2, 64, 16, 16),))


def _trilinear_inputs(rng, module=None):
    return Case((_f32(rng, 1, 64, 8, 8, 8),))


_MM = f"{T}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
_MM_TOL = "matrix_multiplication_torch.py: torch.allclose(..., atol=1e-4, rtol=1e-2)"
_ATTN = f"{T}/attention_fwd_performance/attention_kernels.py"
_ATTN_REF = FileReference(f"{T}/attention_fwd_performance/test_attention.py", "numpy_attention")
_ATTN_TOL = "test_attention.py: np.allclose(attn_out, numpy_output, atol=1e-2)"
_MAMBA = f"{T}/fused_mamba/mamba_nki_kernels.py"
_MAMBA_REF = FileReference(f"{T}/fused_mamba/mamba_torch.py", "mamba_layer", torch_inputs=True)
_MAMBA_TOL = "mamba_torch.py: torch.allclose(torch_out, nki_out, atol=1e-2, rtol=1e-2)"


def _mm(entry: str, k: int, m: int, n: int, **meta: int) -> KernelSpec:
    return KernelSpec(f"nki-samples tutorials/matrix_multiplication {entry}", "nki-samples", _MM, entry, CURRENT,
                      _matmul_inputs(k, m, n, **meta), LocalReference(_matmul_t, "torch.matmul(lhs, rhs) of "
                      "matrix_multiplication_torch.py"), 1e-2, 1e-4, _MM_TOL)


SPECS: tuple[KernelSpec, ...] = (
    _mm("nki_matmul_basic_", 128, 64, 512),
    _mm("nki_matmul_tiled_", 256, 256, 1024),
    _mm("nki_matmul_hoist_load_", 256, 256, 1024),
    _mm("nki_matmul_block_free_dimension_", 256, 256, 1024),
    _mm("nki_matmul_fully_optimized_", 256, 256, 1024, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2),
    KernelSpec("nki-samples tutorials/tensor_addition", "nki-samples",
               f"{T}/tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_", LEGACY, _add_inputs,
               LocalReference(_add, "output_np = a + b of the tutorial's __main__"), 1e-2, 1e-4,
               "tensor_addition_nki_kernels.py: np.allclose(output_np, output_nki, atol=1e-4, rtol=1e-2)",
               grid=(2, 2)),
    KernelSpec("nki-samples tutorials/transpose2d", "nki-samples", f"{T}/transpose2d/transpose2d_nki_kernels.py",
               "tensor_transpose2D_kernel_", LEGACY, _transpose_inputs,
               LocalReference(_transpose2d, "np.transpose(a.reshape(P, X, Y), (0, 2, 1)) of the tutorial's __main__"),
               1e-5, 1e-8, "transpose2d_nki_kernels.py: np.allclose(a_t_np, a_t_nki) (numpy defaults)"),
    KernelSpec("nki-samples tutorials/average_pool2d", "nki-samples",
               f"{T}/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel", LEGACY, _avgpool_inputs,
               FileReference(f"{T}/average_pool2d/average_pool2d_nki_kernels.py", "np_average_pool_2D"), 0.0, 0.0,
               "average_pool2d_nki_kernels.py: (out_nki == out_np).all() (exact)"),
    KernelSpec("nki-samples tutorials/fused_mamba", "nki-samples", _MAMBA, "mamba_v1", LEGACY, _mamba_inputs,
               _MAMBA_REF, 1e-2, 1e-2, _MAMBA_TOL),
    KernelSpec("nki-samples tutorials/attention_fwd_performance", "nki-samples", _ATTN, "attn_fwd_v1", LEGACY,
               _attention_inputs(128), _ATTN_REF, 0.0, 1e-2, _ATTN_TOL),
    KernelSpec("nki-samples contributed/matmul", "nki-samples", f"{C}/matmul.py", "matmul", LEGACY,
               _contrib_matmul_inputs, LocalReference(_matmul_t, "Z_corr = A.T @ B of check_correct"), 1e-2, 1e-4,
               "matmul.py check_correct: np.isclose(Z, Z_corr, atol=1e-4, rtol=1e-2)"),
    KernelSpec("nki-samples contributed/maxpooling", "nki-samples", f"{C}/maxpooling.py", "max_pooling_2d_stride_1",
               LEGACY, _maxpool_inputs, LocalReference(_max_pool, "F.max_pool2d(x, pool_size, stride=1) of "
               "check_correct"), 1.3e-6, 1e-5, "maxpooling.py check_correct: torch.allclose(rtol=1.3e-6, atol=1e-5)"),
    KernelSpec("nki-samples contributed/interpolate_bilinear_fwd", "nki-samples", f"{C}/interpolate_bilinear_fwd.py",
               "interpolate_bilinear_2x_fwd", LEGACY, _bilinear_inputs,
               LocalReference(_interpolate("bilinear"), "torch.nn.functional.interpolate(scale_factor=2, "
               "mode='bilinear') of check_correct"), 1e-2, 1e-4,
               "interpolate_bilinear_fwd.py check_correct: torch.allclose(atol=1e-4, rtol=1e-2)"),
    KernelSpec("nki-samples contributed/interpolate_trilinear_fwd", "nki-samples",
               f"{C}/interpolate_trilinear_fwd.py", "interpolate_trilinear_2x_fwd", LEGACY, _trilinear_inputs,
               LocalReference(_interpolate("trilinear"), "torch.nn.functional.interpolate(scale_factor=2, "
               "mode='trilinear') of check_correct"), 1e-2, 1e-4,
               "interpolate_trilinear_fwd.py check_correct: torch.allclose(atol=1e-4, rtol=1e-2)"),
    # further versions of the same tutorials, checked by the same references
    *(KernelSpec(f"nki-samples tutorials/fused_mamba {v}", "nki-samples", _MAMBA, v, LEGACY, _mamba_inputs,
                 _MAMBA_REF, 1e-2, 1e-2, _MAMBA_TOL, extra=True) for v in ("mamba_v2", "mamba_v3")),
    *(KernelSpec(f"nki-samples tutorials/attention_fwd_performance {v}", "nki-samples", _ATTN, v, LEGACY,
                 _attention_inputs(128 if v == "attn_fwd_v2" else 512), _ATTN_REF, 0.0, 1e-2, _ATTN_TOL, extra=True)
      for v in ("attn_fwd_v2", "attn_fwd_v3", "attn_fwd_v4", "attn_fwd_v5", "attn_fwd_v6", "attn_fwd_v7",
                "attn_fwd_v8", "attn_fwd_v8a", "attn_fwd_v9", "attn_fwd_v10", "attn_fwd_v11")),
)
