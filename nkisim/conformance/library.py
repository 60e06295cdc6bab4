"""Specs for aws-neuron/nki-library kernels: small shapes from their tests, their torch references.

Paths are relative to an nki-library checkout, whose ``src`` is put on ``sys.path`` so kernels import
as ``nkilib_src.nkilib...`` with their relative imports, as the library's own tests import them. Each
input set is one of the (smallest) parameter sets of the kernel's integration test, generated here
the way that test generates it; tolerances are that test's ``rtol`` / ``atol``, applied as the
library's test comparator applies them (``Criterion.range``: relative to the reference's largest value). Kernels that write
into an output argument (``output.must_alias_input`` in their tests) are compared on that argument.
"""
from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from .spec import Case, Criterion, FileReference, Generation, KernelSpec, LocalReference

LIB = "src/nkilib_src/nkilib"
PKG = "nkilib_src.nkilib"
TESTS = "test/integration/nkilib"
CURRENT = Generation.current


def _case(**kwargs: Any) -> Case:
    """The library's convention: the kernel and its torch reference take the same keyword arguments."""
    return Case((), kwargs, ref_args=(), ref_kwargs=kwargs)


def _gauss(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _ref(folder: str, stem: str, name: str) -> FileReference:
    return FileReference(f"{LIB}/{folder}/{stem}.py", name, torch_inputs=True,
                         module=f"{PKG}.{folder.replace('/', '.')}.{stem}")


def _spec(name: str, folder: str, stem: str, entry: str, inputs: Any, ref: FileReference, rtol: float, atol: float,
          test: str, **more: Any) -> KernelSpec:
    return KernelSpec(f"nki-library {folder}/{stem}" if name == "" else f"nki-library {name}", "nki-library",
                      f"{LIB}/{folder}/{stem}.py", entry, CURRENT, inputs, ref, rtol, atol,
                      f"{TESTS}/{test}: rtol={rtol}, atol={atol}", module=f"{PKG}.{folder.replace('/', '.')}.{stem}",
                      criterion=Criterion.range, **more)


# --- inputs: one small parameter set of each kernel's integration test --------------------------------
def _cumsum(rng, module):
    return _case(x=_gauss(rng, 1, 256), axis=-1)                       # test_cumsum: (1, 256, 2, 1, float32)


def _conv1d(rng, module):
    # test_conv1d CONV1D_BASIC_PARAMS[0]: B=1, C_in=16, C_out=32, L=20, K=3, no padding/bias/activation
    return _case(x_in=_gauss(rng, 1, 16, 20), filters=_gauss(rng, 3, 16, 32), bias=None, stride=1, padding=(0, 0),
                 dilation=1, activation_fn=None, lnc_shard=False)


def _depthwise(rng, module):
    # test_depthwise_conv1d all_test_cases[0]: batch 1, 16 channels, width 512, kernel 3, bf16
    kw = {"img_ref": _gauss(rng, 1, 16, 1, 512, dtype=ml_dtypes.bfloat16),
              "filter_ref": _gauss(rng, 16, 1, 1, 3, dtype=ml_dtypes.bfloat16), "padding": ((0, 0), (0, 0)), "stride": (1, 1),
              "rhs_dilation": (1, 1), "lhs_dilation": (1, 1), "feature_group_count": 16, "batch_group_count": 1}
    return Case((), kw, ref_args=(kw,))


def _rmsnorm(rng, module):
    # test_rmsnorm_tkg: (lnc 1, batch 1, seqlen 1, hidden 8192, fp16); output aliases an input
    return _case(input=_gauss(rng, 1, 1, 8192, dtype=np.float16), gamma=_gauss(rng, 1, 8192, dtype=np.float16),
                 output=np.zeros((128, 1, 64), np.float16), hidden_actual=None, hidden_dim_tp=False,
                 shard_on_h=False)


def _layernorm(rng, module):
    # test_layernorm_tkg: (lnc 1, batch 1, seqlen 1, hidden 8192, fp16)
    return _case(input=_gauss(rng, 1, 1, 8192, dtype=np.float16), gamma=_gauss(rng, 1, 8192, dtype=np.float16),
                 output=np.zeros((128, 1, 64), np.float16), beta=_gauss(rng, 1, 8192, dtype=np.float16),
                 shard_on_h=False)


def _rope(rng, module):
    # test_rope: (d_head 128, B 32, n_heads 4, S 64, interleaved layout), bf16
    bf = ml_dtypes.bfloat16
    return _case(x_in=_gauss(rng, 128, 32, 4, 64, dtype=bf), cos=_gauss(rng, 64, 32, 64, dtype=bf),
                 sin=_gauss(rng, 64, 32, 64, dtype=bf), lnc_shard=False, contiguous_layout=False,
                 relayout_in_sbuf=False)


def _cross_entropy(rng, module):
    # test_cross_entropy_forward: fp32 logits (B*T = 64 positions, V = 1024), PB 64, CS = V
    logits = _gauss(rng, 64, 1024)
    targets = rng.integers(0, 1024, size=(64,), dtype=np.int32)
    return Case((), {"logits_hbm": logits, "targets_hbm": targets, "positions_per_batch": 64, "chunk_size": 1024,
                         "dtype": "float32"}, ref_args=(logits, targets.astype(np.int64)))


def _cascaded_max(rng, module):
    return _case(input_tensor=_gauss(rng, 1, 1, 3168))                 # test_cascaded_max: [1, 1, 1, 3168, fp32]


def _topk(rng, module):
    # test_topk: batch 1, seqlen 1, vocab 3168, k 8, fp32, lnc 1; config built with the module's own helpers
    inp = _gauss(rng, 1, 3168)
    topk_config = module.create_topk_config(inp_shape=(1, 1, 3168), inp_dtype="float32", k=8, sorted=True,
                                            num_programs=1)
    config = module.create_rotational_topk_config(inp_shape=inp.shape, topk_config=topk_config)
    config = module.prepare_rotational_constants(config)
    return Case((), {"inp": inp, "config": config}, ref_args=(), ref_kwargs={"inp": inp, "config": config})


def _dynamic_add(rng, module):
    # test_dynamic_elementwise_add: m 256, h 512, bf16; num_m_tiles = m // 128 in a [[n]] int32 tensor
    a = _gauss(rng, 256, 512, dtype=ml_dtypes.bfloat16)
    b = _gauss(rng, 256, 512, dtype=ml_dtypes.bfloat16)
    return Case((), {"input_a": a, "input_b": b, "num_m_tiles": np.array([[2]], np.int32)}, ref_args=(a, b))


def _find_nonzero(rng, module):
    # test_find_nonzero_indices: T 4096, E 128, top_k 8, chunk 4096, int32; K nonzeros per column, shuffled
    t, e, top_k = 4096, 128, 8
    k = t * top_k // e
    flat = rng.permutation(np.concatenate([np.ones(k * e), np.zeros((t - k) * e)]))
    return _case(input_tensor=flat.reshape(e, t).T.astype(np.int32), chunk_size=4096)


def _indexed_flatten(rng, module):
    # test_indexed_flatten: T 4096, E 2, f_len 128
    t, e, f_len = 4096, 2, 128
    output_len = ((e * t + 1024 + 127) // 128) * 128
    return _case(input_tensor=np.arange(e * t, dtype=np.int32).reshape(e, t), f_len=f_len, output_len=output_len,
                 row_offsets=np.array([(t // f_len) * i for i in range(e)], np.int32), row_offsets_start=None,
                 padding_val=-1)


def _router_topk(rng, module):
    # test_router_topk base config 0: T 4, H 3072, E 128, k 4, softmax, bias; x in HBM as [H, T]; bf16
    import importlib

    act = importlib.import_module(f"{PKG}.core.utils.common_types").RouterActFnType.SOFTMAX
    t, h, e, k = 4, 3072, 128, 4
    bf = ml_dtypes.bfloat16

    def uniform(*shape):
        return rng.uniform(-0.1, 0.1, shape).astype(np.float32).astype(bf)
    return _case(x=uniform(h, t), w=uniform(h, e), w_bias=uniform(1, e), router_logits=np.zeros((t, e), bf),
                 expert_affinities=np.zeros((t, e), bf), expert_index=np.zeros((t, k), np.uint32), act_fn=act, k=k,
                 x_hbm_layout=0, x_sb_layout=0, output_in_sbuf=False, router_pre_norm=False, norm_topk_prob=False,
                 use_column_tiling=False, use_indirect_dma_scatter=False, use_PE_broadcast_w_bias=False,
                 shard_on_tokens=False, x_input_in_sbuf=False)


def _rope_hf(rng, module):
    # test_rope_hf: (batch 1, 32 q heads, 8 kv heads, seq 256, head_dim 128, fp32, forward), lnc 1
    q, k = _gauss(rng, 1, 32, 256, 128), _gauss(rng, 1, 8, 256, 128)
    return _case(q=q, k=k, q_out=np.zeros_like(q), k_out=np.zeros_like(k), cos=_gauss(rng, 1, 256, 128),
                 sin=_gauss(rng, 1, 256, 128), backward=False)


def _topk_reduce(rng, module):
    # test_topk_reduce (lnc 1, 8 source ranks, T 4, K 4, H 2880), bf16: T*K rows scattered into a buffer
    # of -1s, each row's global token index packed as an int32 into its last two bf16 columns
    src_ranks, t, k, h = 8, 4, 4, 2880
    bf = ml_dtypes.bfloat16
    buf = np.full((src_ranks * t, h + 2), -1, dtype=bf)
    token_ids = np.arange(t, dtype=np.int32).repeat(k).reshape(t * k, 1).view(bf)
    rows = np.concatenate([_gauss(rng, t * k, h, dtype=bf), token_ids], axis=1)
    buf[rng.permutation(src_ranks * t)[: t * k]] = rows
    return _case(input=buf, T=t, K=k)


def _common_types() -> Any:
    import importlib

    return importlib.import_module(f"{PKG}.core.utils.common_types")


def _output_projection_tkg(rng, module):
    # test_output_proj_tkg OUTPUT_PROJ_TKG_TEST_CASES[2]: B 4, n_heads 8, S_tkg 4, d_head 64, H 3072,
    # no quantization, no bias, no transposed output; bf16
    bf = ml_dtypes.bfloat16
    b, n_heads, s_tkg, d_head, h = 4, 8, 4, 64, 3072
    return _case(attention=_gauss(rng, d_head, b, n_heads, s_tkg, dtype=bf),
                 weight=_gauss(rng, d_head * n_heads, h, dtype=bf), bias=None,
                 quantization_type=_common_types().QuantizationType.NONE, weight_scale=None, input_scale=None,
                 TRANSPOSE_OUT=False, OUT_IN_SB=False)


def _attention_cte(rng, module):
    # test_attention_cte_no_cp_unit: bs 1, seqlen_kv 128, seqlen_q 128, d 128, scale 1.0, bf16, causal,
    # q and k as (bs, d, seqlen), transposed output (bs, d, seqlen_q); uniform [0, 1) inputs
    import torch

    bf = ml_dtypes.bfloat16
    bs, seqlen, d = 1, 128, 128

    def sample(*shape):
        return rng.random(shape).astype(np.float32).astype(bf)
    common = {"q": sample(bs, d, seqlen), "k": sample(bs, d, seqlen), "v": sample(bs, seqlen, d), "scale": 1.0,
              "causal_mask": True, "k_prior": None, "v_prior": None, "prior_used_len": None, "sink": None,
              "sliding_window": 0, "tp_q": False, "tp_k": False, "tp_out": True, "cache_softmax": False,
              "cp_offset": None, "global_cp_deg": None, "cp_strided_q_slicing": False, "bound_min": None,
              "bound_max": None}
    return Case((), {**common, "softmax_dtype": module.nl.float32, "mm_out_dtype": module.nl.float32}, ref_args=(),
                ref_kwargs={**common, "softmax_dtype": torch.float32})


def _gen_mask_tkg(rng, module):
    # test_gen_mask_tkg flat_kv_strided_test_perms[0]: batch 4, q_head 1, s_ctx 256, s_active 1, lnc 1, strided
    # MM1; the position ids are cache lengths in [1, s_ctx), one per batch, broadcast over 128 partitions
    batch, q_head, s_ctx, s_active = 4, 1, 256, 1
    cache_lens = rng.integers(1, s_ctx, size=(batch,)).astype(np.int32)
    row = np.repeat(cache_lens, s_active).astype(np.float32)
    return _case(pos_ids_hbm=np.broadcast_to(row[None, :], (128, batch * s_active)).copy(),
                 mask_out_hbm=np.zeros((128, s_ctx // 128, batch, q_head, s_active), np.float32), bs=batch,
                 q_head=q_head, s_active=s_active, is_s_prior_sharded=False, s_prior_per_shard=s_ctx,
                 s_prior_offset=0, block_len=0, strided_mm1=True)


def _output_projection_cte(rng, module):
    # test_output_proj_cte OUTPUT_PROJ_CTE_UNIT_CASES: batch 1, seqlen 128, hidden 8192, 1 head, d_head 128,
    # no bias; bf16, uniform [0, 1) inputs, no quantization
    bf = ml_dtypes.bfloat16
    batch, seqlen, hidden, n_head, d_head = 1, 128, 8192, 1, 128

    def sample(*shape):
        return rng.random(shape).astype(np.float32).astype(bf)
    return _case(attention=sample(batch, n_head, d_head, seqlen), weight=sample(n_head * d_head, hidden), bias=None,
                 quantization_type=_common_types().QuantizationType.NONE, input_scales=None, weight_scales=None)


def _attention_bwd(rng, module):
    # test_attention_bwd fast_test_cases: batch 1, 1 q head, 1 kv head, seq_len 2048, head_dim 128, fp32, causal,
    # no sinks, softmax_scale 1.0, mixed precision, lnc 1; o and lse from the reference module's compute_o_lse
    import importlib

    import torch

    ref = importlib.import_module(f"{PKG}.core.attention.attention_bwd_torch")
    b, h, s, d = 1, 1, 2048, 128
    q, k, v, dy = (_gauss(rng, b, h, d, s) for _ in range(4))
    o, lse, _ = ref.compute_o_lse(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), True, True,
                                  softmax_scale=1.0, sliding_window=None, sinks=None, bound_min=None, bound_max=None)
    return _case(q_ref=q, k_ref=k, v_ref=v, o_ref=o.float().numpy(), dy_ref=dy, lse_ref=lse.float().numpy(),
                 sinks_ref=None, use_causal_mask=True, mixed_precision=True, softmax_scale=1.0, sliding_window=None,
                 bound_min=None, bound_max=None)


def _qkv_tkg(rng, module):
    # test_qkv_tkg qkv_tkg_kernel_accuracy_test_perms (H remainder tile only): lnc 1, batch 1, seqlen 1, hidden 128,
    # fused_qkv_dim 512 (2 q heads, 1 kv head, d_head 128), no norm, no quantization, no fused add, BSD; bf16
    types = _common_types()
    bf = ml_dtypes.bfloat16
    kw = {"hidden": _gauss(rng, 1, 1, 128, dtype=bf), "qkv_w": _gauss(rng, 128, 512, dtype=bf), "norm_w": None,
          "fused_add": False, "mlp_prev": None, "attn_prev": None, "d_head": 128, "num_kv_heads": 1,
          "num_q_heads": 2, "output_layout": types.QKVOutputLayout.BSD, "eps": 1e-6,
          "norm_type": types.NormType.NO_NORM, "quantization_type": types.QuantizationType.NONE,
          "qkv_w_scale": None, "qkv_in_scale": None, "output_in_sbuf": False, "qkv_bias": None, "norm_bias": None,
          "hidden_actual": None}
    return Case((), {**kw, "is_h_dim_4h_transposed": False}, ref_args=(), ref_kwargs=kw)


def _moe_tkg(rng, module):
    # test_moe_tkg MOE_TKG_TEST_PARAMS (selective experts, basic): lnc 2, tokens 2, hidden 512, intermediate 128,
    # 2 experts, top_k 1, SiLU, post-scale, fp16, clamped (gate <= 7, -6 <= up <= 8), no bias; fp32 affinities
    # that sum to 1 over each token's chosen experts, as build_moe_tkg makes them
    types = _common_types()
    t, h, i, e, k = 2, 512, 128, 2, 1
    index = rng.integers(0, e, size=(t, k)).astype(np.int32)
    weights = rng.random((t, k))
    weights /= weights.sum(axis=1, keepdims=True)
    affinities = np.zeros((t, e), np.float32)
    np.put_along_axis(affinities, index, weights, axis=1)
    return _case(hidden_input=_gauss(rng, t, h, dtype=np.float16),
                 expert_gate_up_weights=_gauss(rng, e, h, 2, i, dtype=np.float16),
                 expert_down_weights=_gauss(rng, e, i, h, dtype=np.float16), expert_affinities=affinities,
                 expert_index=index, is_all_expert=False, rank_id=None, mask_unselected_experts=False,
                 expert_gate_up_bias=None, expert_down_bias=None, expert_gate_up_weights_scale=None,
                 expert_down_weights_scale=None, gate_up_input_scale=None, down_input_scale=None,
                 expert_affinities_eager=None,
                 expert_affinities_scaling_mode=types.ExpertAffinityScaleMode.POST_SCALE,
                 activation_fn=types.ActFnType.SiLU, output_dtype=module.nl.float16, gate_clamp_upper_limit=7.0,
                 gate_clamp_lower_limit=None, up_clamp_upper_limit=8.0, up_clamp_lower_limit=-6.0,
                 is_all_expert_dynamic=False, block_size=None)


def _moe_block_tkg(rng, module):
    # test_moe_block_tkg MANUAL_PARAMS (all-expert, GPT-OSS): lnc 2, batch 19, seqlen 1, hidden 3072, intermediate
    # 128, 128 global / 1 local expert, top_k 4, softmax router, Swish, post-scale, fp16 weights and inputs, bias,
    # clamp (gate <= 7, -6 <= up <= 8), router logits returned, fp16 router matmul; rank id in [0, 128)
    types = _common_types()
    f16 = np.float16
    t, h, i, e_global, e_local = 19, 3072, 128, 128, 1

    def small(*shape):
        return rng.uniform(-0.1, 0.1, shape).astype(f16)
    return _case(inp=small(t, 1, h), gamma=small(1, h), router_weights=small(h, e_global),
                 expert_gate_up_weights=_gauss(rng, e_local, h, 2, i, dtype=f16),
                 expert_down_weights=_gauss(rng, e_local, i, h, dtype=f16), expert_gate_up_weights_scale=None,
                 expert_down_weights_scale=None, router_bias=small(1, e_global),
                 expert_gate_up_bias=_gauss(rng, e_local, 2, i, dtype=f16),
                 expert_down_bias=_gauss(rng, e_local, h, dtype=f16), top_k=4,
                 router_act_fn=types.RouterActFnType.SOFTMAX, router_pre_norm=False, norm_topk_prob=False,
                 expert_affinities_scaling_mode=types.ExpertAffinityScaleMode.POST_SCALE,
                 hidden_act_fn=types.ActFnType.Swish, gate_clamp_upper_limit=7.0, gate_clamp_lower_limit=None,
                 up_clamp_upper_limit=8.0, up_clamp_lower_limit=-6.0, router_mm_dtype=module.nl.float16,
                 hidden_actual=None, skip_router_logits=False, is_all_expert=True,
                 rank_id=np.array([[int(rng.integers(0, e_global // e_local))]], np.uint32))


def _attention_tkg(rng, module):
    # test_attention_tkg attention_tkg_fast_configs (LNC-shard on batch, s_prior < 256):
    # AttnTKGConfig(1, 1, 1, 128, 256, 64, 0, tp_k_prior, q/k in SBUF, outputs in SBUF), bf16, no sink, lnc 1;
    # uniform [0, 1) inputs; the mask from the library's build_full_attention_mask at the test's position id
    import importlib

    import torch

    utils = importlib.import_module(f"{PKG}.core.attention.attention_tkg_utils")
    masks = importlib.import_module(f"{PKG}.core.attention.gen_mask_tkg_torch")
    cfg = utils.AttnTKGConfig(1, 1, 1, 128, 256, 64, 0, tp_k_prior=True, qk_in_sb=True, k_out_in_sb=True,
                              out_in_sb=True)
    bf = ml_dtypes.bfloat16

    def sample(*shape):
        return rng.random(shape).astype(np.float32).astype(bf)
    pos_id = ((np.arange(cfg.bs) * 3 + (cfg.curr_sprior // 4 * 3)) % (cfg.curr_sprior - cfg.s_active))[:, None]
    mask = masks.build_full_attention_mask(
        cache_lens=torch.from_numpy(pos_id.flatten()).to(torch.float32), batch=cfg.bs, num_heads=cfg.q_head,
        s_active=cfg.s_active, s_ctx=cfg.curr_sprior, lnc=1, block_len=cfg.block_len, include_active_mask=True,
        transposed=True, enable_fa_s_prior_tiling=cfg.enable_fa_s_prior_tiling).numpy().astype(np.bool_)
    rows = cfg.bs * cfg.q_head * cfg.s_active
    kw = {"q": sample(cfg.d_head, rows), "k_active": sample(cfg.d_head, cfg.bs * cfg.s_active),
          "v_active": sample(cfg.bs, 1, cfg.s_active, cfg.d_head),
          "k_prior": sample(cfg.bs, 1, cfg.full_sprior, cfg.d_head),
          "v_prior": sample(cfg.bs, 1, cfg.full_sprior, cfg.d_head), "mask": mask.astype(np.uint8),
          "inv_freqs": None, "rope_pos_ids": None, "start_pos_ids": None, "sink": None, "active_blocks_table": None,
          "attn_out_shape": (cfg.d_head, rows), "k_out_shape": (cfg.d_head, cfg.bs * cfg.s_active), "cfg": cfg,
          "lnc": 1, "DBG": False}
    kw = {**kw, "dtype": module.nl.bfloat16}
    return Case((), kw, ref_args=(), ref_kwargs=kw)   # ``lnc=`` is the wrapper's own argument


def _attention_tkg_reference(q, k_active, v_active, k_prior, v_prior, mask, inv_freqs, rope_pos_ids, start_pos_ids,
                             sink, active_blocks_table, attn_out_shape, k_out_shape, cfg, dtype, lnc, DBG):
    """The test's ``attn_tkg_torch_wrapper`` (defined inside its test function): fp32 torch inputs, a zeroed
    output, then the library's ``attention_tkg_torch_ref[lnc]``; only ``golden_out`` is compared."""
    import importlib

    import torch

    ref = importlib.import_module(f"{PKG}.core.attention.attention_tkg_torch").attention_tkg_torch_ref

    def t(a):
        return None if a is None else torch.from_numpy(np.asarray(a, np.float32 if a.dtype.kind == "V" or
                                                                  a.dtype == ml_dtypes.bfloat16 else a.dtype))
    out, _ = ref[lnc](q=t(q), k_active=t(k_active), v_active=t(v_active), k_prior=t(k_prior), v_prior=t(v_prior),
                      mask=t(mask), out=torch.zeros(attn_out_shape, dtype=torch.float32), cfg=cfg, sbm=None,
                      inv_freqs=t(inv_freqs), rope_pos_ids=t(rope_pos_ids), start_pos_ids=t(start_pos_ids),
                      sink=t(sink), active_blocks_table=t(active_blocks_table), k_out=None, DBG_TENSORS=None)
    return out


def _attention_block_tkg(rng, module):
    # test_attention_block_tkg (Gemma3 with pre-RoPE gamma): batch 1, 1 q head, d_head 128, H 5376, S_ctx 1024,
    # S_tkg 1, no cache update, RMSNorm on X, pre-RoPE QK RMSNorm with gammas, RoPE, output projection; bf16,
    # lnc 2; generate_kernel_inputs' distributions (fan-in-scaled weights, near-unity gammas, U[-1, 1] else)
    import importlib

    import torch

    masks = importlib.import_module(f"{PKG}.core.attention.gen_mask_tkg_torch")
    types = _common_types()
    bf = ml_dtypes.bfloat16
    b, d, h, s_ctx, s_tkg, qkv = 1, 128, 5376, 1024, 1, 3 * 128

    def uniform(*shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32).astype(bf)
    cache_len = ((np.arange(b) * 3 + (s_ctx // 4 * 3)) % (s_ctx - s_tkg))[:, None]
    mask = masks.build_full_attention_mask(
        cache_lens=torch.from_numpy(cache_len.flatten()).to(torch.float32), batch=b, num_heads=1, s_active=s_tkg,
        s_ctx=s_ctx, lnc=2, block_len=0, include_active_mask=True, transposed=True, enable_fa_s_prior_tiling=True,
        KVDP=1).numpy()
    eps = 1e-3
    return _case(
        X=uniform(b, s_tkg, h), X_in_sb=False, X_hidden_dim_actual=h, rmsnorm_X_enabled=True, rmsnorm_X_eps=eps,
        rmsnorm_X_gamma=uniform(1, h, lo=0.5, hi=1.5),
        W_qkv=(rng.normal(0.0, 1.0 / np.sqrt(h), (h, qkv)).astype(np.float32)).astype(bf), bias_qkv=None,
        quantization_type_qkv=types.QuantizationType.NONE, weight_dequant_scale_qkv=None,
        input_dequant_scale_qkv=None, rmsnorm_QK_enabled=True, rmsnorm_QK_eps=eps,
        W_rmsnorm_Q_pre_rope=uniform(1, d, lo=0.5, hi=1.5), W_rmsnorm_K_pre_rope=uniform(1, d, lo=0.5, hi=1.5),
        cos=uniform(d // 2, b, s_tkg), sin=uniform(d // 2, b, s_tkg), rope_contiguous_layout=True,
        rmsnorm_QK_post_rope_enabled=False, rmsnorm_QK_post_rope_eps=eps, W_rmsnorm_Q_post_rope=None,
        W_rmsnorm_K_post_rope=None, skip_attention=False, K_cache_transposed=False, active_blocks_table=None,
        K_cache=uniform(b, 1, s_ctx, d), V_cache=uniform(b, 1, s_ctx, d),
        attention_mask=np.ascontiguousarray(mask).astype(np.uint8), sink=None, softmax_scale=None,
        enable_fa_s_prior_tiling=True, k_scale=None, v_scale=None, update_cache=False,
        kv_cache_update_idx=cache_len.astype(np.uint32),
        W_out=(rng.normal(0.0, 0.5, (d, h)).astype(np.float32)).astype(bf), bias_out=None,
        quantization_type_out=types.QuantizationType.NONE, weight_dequant_scale_out=None,
        input_dequant_scale_out=None, transposed_out=False, out_in_sb=False, KVDP=1, KVDP_replica_group=None)


def _attention_block_tkg_reference(**kwargs: Any) -> Any:
    """The test's golden: ``AttentionBlockTkgTorchRef(lnc)(**inputs)`` on fp32 torch inputs (its
    ``torch_ref_wrapper``); returns X_out, K_tkg, V_tkg in the kernel's order."""
    import importlib

    import torch

    ref = importlib.import_module(f"{PKG}.experimental.transformer.attention_block_tkg_torch")

    def t(a):
        if not isinstance(a, np.ndarray):
            return a
        return torch.from_numpy(np.asarray(a, np.float32) if a.dtype in (ml_dtypes.bfloat16, np.float16) else a)
    return ref.AttentionBlockTkgTorchRef(2)(**{k: t(v) for k, v in kwargs.items()})


def _moe_cte(rng, module):
    # test_moe_cte BWMM_LNC2_TEST_CASES (shard on block): H 3072, T 1024, E 8, block 256, top_k 4, I 192, bf16,
    # skip mode 1 (skip out-of-range tokens), bias, Swish, post-scale, clamps gate <= 7, -9 <= up <= 8; lnc 2.
    # Routing built as build_bwmm_inputs builds it: each token picks top_k distinct experts, tokens are packed
    # into blocks of 256 per expert, padding blocks go to the last expert, unused slots hold -1.
    types = _common_types()
    skip_mode = module.SkipMode(True, False)
    h, t, e, b, k, i = 3072, 1024, 8, 256, 4, 192
    n_blocks = math.ceil((t * k - (e - 1)) / b) + e - 1               # get_n_blocks ...
    n_blocks = 2 * math.ceil(n_blocks / 2)                                # ... rounded up to the LNC degree
    router = np.stack([rng.choice(e, k, replace=False) for _ in range(t)])
    token_experts = np.zeros((t, e))
    for j in range(k):
        token_experts += router[:, j:j + 1] == np.arange(e)[None, :]
    blocks_per_expert = np.ceil(token_experts.sum(0) / b).astype(np.int32)
    blocks_per_expert[e - 1] += n_blocks - blocks_per_expert.sum()
    block_to_expert = np.arange(e).repeat(blocks_per_expert).astype(np.int32)
    position = np.cumsum(token_experts, axis=0)
    position[:, 1:] += (np.cumsum(blocks_per_expert) * b)[:-1]
    position = np.where(token_experts, position, 0).astype(np.int32)
    token_position_to_id = np.full((n_blocks * b + 1,), -1)
    token_position_to_id[position] = np.arange(t)[:, None]
    bf = ml_dtypes.bfloat16
    affinities = (rng.random((t, e)) * token_experts).astype(bf)
    return _case(
        hidden_states=rng.random((t, h)).astype(bf), expert_affinities_masked=affinities.reshape(-1, 1),
        gate_up_proj_weight=rng.uniform(-0.1, 0.1, (e, h, 2, i)).astype(bf),
        down_proj_weight=rng.uniform(-0.1, 0.1, (e, i, h)).astype(bf),
        token_position_to_id=token_position_to_id[1:].astype(np.int32), block_to_expert=block_to_expert,
        block_size=b, spec=module.MoECTESpec(implementation=module.MoECTEImplementation.shard_on_block),
        gate_and_up_proj_bias=rng.uniform(-1, 1, (e, 2, i)).astype(bf),
        down_proj_bias=rng.uniform(-1.632, 1.4375, (e, h)).astype(bf), activation_function=types.ActFnType.Swish,
        skip_dma=skip_mode, compute_dtype=module.nl.bfloat16, is_tensor_update_accumulating=True,
        expert_affinities_scaling_mode=types.ExpertAffinityScaleMode.POST_SCALE, gate_clamp_upper_limit=7.0,
        gate_clamp_lower_limit=None, up_clamp_upper_limit=8.0, up_clamp_lower_limit=-9.0)


def _moe_cte_reference(spec: Any = None, **kwargs: Any) -> Any:
    """The test's ``moe_cte_torch_wrapper``: ``moe_cte_torch_ref`` with the test's ``BWMMFunc.SHARD_ON_BLOCK``
    (defined in its test module) on fp32 torch inputs; returns its ``output``."""
    import importlib

    import torch

    bwmm = importlib.import_module("test.integration.nkilib.core.moe.moe_cte.test_moe_cte_common").BWMMFunc
    ref = importlib.import_module(f"{PKG}.core.moe.moe_cte.moe_cte_torch").moe_cte_torch_ref

    def t(a):
        if not isinstance(a, np.ndarray):
            return a
        return torch.from_numpy(np.asarray(a, np.float32) if a.dtype == ml_dtypes.bfloat16 else a)
    return ref(**{key: t(v) for key, v in kwargs.items()}, bwmm_func=bwmm.SHARD_ON_BLOCK, lnc_degree=2,
               top_k=4)["output"]


def _transformer_tkg(rng, module):
    # test_transformer_tkg TEST_GRID[0]: tp 8, batch 1, S_tkg 1, S_ctx 1024, 64 q heads, d_head 128, H 8192,
    # I 28672, lnc 2, rel_tol 2.5 %; bf16, 4 layers (layers 1 and 2 with fp32 MLP scales), 1 kv head; inputs
    # as its generators make them. The replica group is this rank alone, ((0,),): the test's group of 4
    # needs 4 ranks, and its reference models the all-reduce as (ranks in the group) x the local result.
    bf = ml_dtypes.bfloat16
    tp, b, s_tkg, s_ctx, q_heads, d_head, h, i_all, layers = 8, 1, 1, 1024, 64, 128, 8192, 28672, 4
    q_per_core = q_heads // tp
    fd = math.ceil(i_all // tp / 128) * 128
    qkv = d_head * (q_per_core + 2)

    def gauss(shape, std):
        return rng.normal(0.0, std, shape).astype(np.float32).astype(bf)

    def uniform(shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32).astype(bf)
    kw: dict[str, Any] = {"X": uniform((b, s_tkg, h))}
    for name, make in (("W_qkv", lambda: gauss((h, qkv), 1 / np.sqrt(h))),
                       ("W_out", lambda: gauss((q_per_core * d_head, h), 0.5)),
                       ("W_gate", lambda: gauss((h, fd), 1 / np.sqrt(h))), ("W_up", lambda: gauss((h, fd), 1 / np.sqrt(h))),
                       ("W_down", lambda: gauss((fd, h), 1 / np.sqrt(fd))),
                       ("W_gamma_qkv", lambda: uniform((1, h), 0.5, 1.5)),
                       ("W_gamma_mlp", lambda: uniform((1, h), 0.5, 1.5)),
                       ("K_cache", lambda: uniform((b, 1, d_head, s_ctx))),
                       ("V_cache", lambda: uniform((b, 1, s_ctx, d_head)))):
        for layer in range(layers):
            kw[f"{name}_{layer}"] = make()
    cache_lens = np.arange(b) * 3 + (s_ctx // 4 * 3)
    mask_cache = np.ones((s_ctx, b, q_per_core, s_tkg), np.bool_).reshape(b, q_per_core, s_tkg, s_ctx)
    mask_active = np.tril(np.ones((b, q_per_core, s_tkg, s_tkg), np.bool_))
    mask_cache[:, :, :, s_ctx - s_tkg:] = mask_active
    kw.update(RoPE_cos=uniform((d_head // 2, b, s_tkg)), RoPE_sin=uniform((d_head // 2, b, s_tkg)),
              mask_cache=np.ascontiguousarray(mask_cache.transpose((3, 0, 1, 2))), mask_active=mask_active,
              position_ids=(cache_lens[:, None] + np.arange(s_tkg)).astype(np.uint32), eps=1e-6,
              sbuf_residual_and_cc=False, replica_groups=((0,),))
    scale_rng = np.random.default_rng(0)
    for layer in range(layers):
        quantized = layer not in (0, layers - 1)
        for name, shape in (("W_gate_scale", (128, fd)), ("W_up_scale", (128, fd)), ("W_down_scale", (128, h))):
            kw[f"{name}_{layer}"] = np.full(shape, scale_rng.random(), np.float32) if quantized else None
    return Case((), kw, ref_args=(), ref_kwargs=kw)


def _transformer_tkg_reference(**kw: Any) -> Any:
    """The test's ``create_lazy_golden``: ``llama3_transformer_fwd_tkg_torch`` on torch tensors (bf16 as
    bf16), per-layer lists, its output rounded to bf16."""
    import importlib

    import torch

    ref = importlib.import_module(f"{PKG}.experimental.transformer.transformer_tkg_torch")

    def t(a):
        if a is None:
            return None
        if a.dtype == ml_dtypes.bfloat16:
            return torch.tensor(a.astype(np.float32)).to(torch.bfloat16)
        return torch.from_numpy(np.asarray(a))

    def layers(name):
        return [t(kw[f"{name}_{i}"]) for i in range(4)]
    out = ref.llama3_transformer_fwd_tkg_torch(
        X=t(kw["X"]), W_qkvs=layers("W_qkv"), W_outs=layers("W_out"), W_gates=layers("W_gate"),
        W_gate_scales=layers("W_gate_scale"), W_ups=layers("W_up"), W_up_scales=layers("W_up_scale"),
        W_downs=layers("W_down"), W_down_scales=layers("W_down_scale"), W_gamma_qkvs=layers("W_gamma_qkv"),
        W_gamma_mlps=layers("W_gamma_mlp"), RoPE_cos=t(kw["RoPE_cos"]), RoPE_sin=t(kw["RoPE_sin"]),
        mask_cache=t(kw["mask_cache"]), mask_active=t(kw["mask_active"]),
        position_ids=t(kw["position_ids"].astype(np.int64)), K_caches=layers("K_cache"), V_caches=layers("V_cache"),
        num_layers=4, replica_groups=kw["replica_groups"], eps=kw["eps"], mlp_down_proj_layout_enabled=False)
    return out.to(torch.float32).numpy().astype(ml_dtypes.bfloat16)


def _aliased(name: str):
    """Compare the output argument the kernel writes (its test's ``<name>.must_alias_input``)."""
    return lambda result, case: case.kwargs[name]


def _aliased_pair(first: str, second: str):
    return lambda result, case: (case.kwargs[first], case.kwargs[second])


def _first(result, case):
    return result[0] if isinstance(result, tuple) else result


SPECS: tuple[KernelSpec, ...] = (
    _spec("", "core/cumsum", "cumsum", "cumsum", _cumsum, _ref("core/cumsum", "cumsum_torch", "cumsum_torch_ref"),
          1e-3, 1e-3, "core/cumsum/test_cumsum.py"),
    _spec("", "experimental/conv", "conv1d", "conv1d", _conv1d,
          _ref("experimental/conv", "conv1d_torch", "conv1d_torch_ref"), 1e-5, 1e-5,
          "experimental/conv/test_conv1d.py"),
    KernelSpec("nki-library experimental/conv/depthwise_conv1d", "nki-library",
               f"{LIB}/experimental/conv/depthwise_conv1d.py", "depthwise_conv1d_implicit_gemm", CURRENT, _depthwise,
               FileReference(f"{TESTS}/experimental/conv/test_depthwise_conv1d.py", "golden_depthwise_conv1d"),
               1e-2, 1e-2, f"{TESTS}/experimental/conv/test_depthwise_conv1d.py: relative/absolute_accuracy=1e-2",
               module=f"{PKG}.experimental.conv.depthwise_conv1d", criterion=Criterion.range),
    _spec("", "core/subkernels", "rmsnorm_tkg", "rmsnorm_tkg", _rmsnorm,
          _ref("core/subkernels", "rmsnorm_torch", "rmsnorm_tkg_torch_ref_lnc1"), 2e-2, 1e-5,
          "core/subkernels/test_rmsnorm_tkg.py", output=_aliased("output")),
    _spec("", "core/subkernels", "layernorm_tkg", "layernorm_tkg", _layernorm,
          _ref("core/subkernels", "layernorm_torch", "layernorm_tkg_torch_ref_lnc1"), 2e-2, 1e-5,
          "core/subkernels/test_layernorm_tkg.py", output=_aliased("output")),
    _spec("", "core/embeddings", "rope", "RoPE", _rope, _ref("core/embeddings", "rope_torch", "rope_torch_ref"),
          2 ** -7, 1e-3, "core/embeddings/test_rope.py"),
    _spec("experimental/loss/cross_entropy (forward)", "experimental/loss", "cross_entropy", "cross_entropy_forward",
          _cross_entropy, FileReference(f"{LIB}/experimental/loss/cross_entropy_torch.py",
                                        "cross_entropy_forward_torch_ref", torch_inputs=True,
                                        module=f"{PKG}.experimental.loss.cross_entropy_torch"),
          1e-5, 1e-5, "experimental/loss/test_cross_entropy_forward.py (fp32)", lnc=2),
    _spec("", "core/max", "cascaded_max", "cascaded_max", _cascaded_max,
          _ref("core/max", "cascaded_max_torch", "cascaded_max_torch_ref"), 1e-5, 1e-5, "core/max/test_cascaded_max.py"),
    _spec("core/topk (rotational)", "core/topk", "rotational_topk", "rotational_topk", _topk,
          _ref("core/topk", "torch_ref", "topk_torch_ref"), 1e-5, 1e-5, "core/topk/test_topk.py (values only)",
          output=_first, ref_output=lambda r: r["topk_values"]),
    _spec("", "experimental/dynamic_shapes", "dynamic_elementwise_add", "dynamic_elementwise_add", _dynamic_add,
          _ref("experimental/dynamic_shapes", "dynamic_elementwise_add_torch", "dynamic_elementwise_add_torch_ref"),
          1e-2, 1e-3, "experimental/dynamic_shapes/test_dynamic_elementwise_add.py"),
    _spec("", "core/subkernels", "find_nonzero_indices", "find_nonzero_indices", _find_nonzero,
          _ref("core/subkernels", "find_nonzero_indices_torch", "find_nonzero_indices_torch_ref"), 0.0, 0.0,
          "core/subkernels/test_find_nonzero_indices.py", lnc=2),
    _spec("", "core/subkernels", "indexed_flatten", "indexed_flatten", _indexed_flatten,
          _ref("core/subkernels", "indexed_flatten_torch", "indexed_flatten_torch_ref"), 0.0, 0.0,
          "core/subkernels/test_indexed_flatten.py", lnc=2),
    # further kernels with a torch reference (not among the 27 targets)
    _spec("", "core/embeddings", "rope_hf", "rope_hf", _rope_hf,
          _ref("core/embeddings", "rope_hf_torch", "rope_hf_torch_ref"), 1e-6, 1e-6,
          "core/embeddings/test_rope_hf.py", output=_aliased_pair("q_out", "k_out"), extra=True),
    _spec("", "experimental/collectives", "topk_reduce", "topk_reduce", _topk_reduce,
          _ref("experimental/collectives", "topk_reduce_torch", "topk_reduce_torch_ref"), 5e-2, 5e-2,
          "experimental/subkernels/test_topk_reduce.py", extra=True),
    _spec("", "core/output_projection", "output_projection_tkg", "output_projection_tkg", _output_projection_tkg,
          _ref("core/output_projection", "output_projection_tkg_torch", "output_projection_tkg_torch_ref"), 2e-2, 1e-5,
          "core/output_projection/test_output_proj_tkg.py", ref_output=lambda r: r["out"], lnc=2, extra=True),
    _spec("", "core/attention", "attention_cte", "attention_cte", _attention_cte,
          _ref("core/attention", "attention_cte_torch", "attention_cte_torch_ref"), 2e-2, 1e-5,
          "core/attention/test_attention_cte.py", lnc=2, extra=True),
    _spec("", "core/output_projection/output_projection_cte", "output_projection_cte", "output_projection_cte",
          _output_projection_cte,
          _ref("core/output_projection/output_projection_cte", "output_projection_cte_torch",
               "output_projection_cte_torch_ref"), 2e-2, 1e-5, "core/output_projection/test_output_proj_cte.py",
          lnc=2, extra=True),
    _spec("", "core/attention", "attention_bwd", "attention_bwd", _attention_bwd,
          _ref("core/attention", "attention_bwd_torch", "attention_bwd_torch_ref"), 2e-2, 1e-5,
          "core/attention/test_attention_bwd.py", extra=True),
    _spec("", "core/qkv", "qkv_tkg", "qkv_tkg", _qkv_tkg, _ref("core/qkv", "qkv_tkg_torch", "qkv_tkg_torch_ref"),
          2e-2, 1e-5, "core/qkv/test_qkv_tkg.py", ref_output=lambda r: r["out"], extra=True),
    _spec("", "core/moe/moe_tkg", "moe_tkg", "moe_tkg", _moe_tkg,
          _ref("core/moe/moe_tkg", "moe_tkg_torch", "moe_tkg_torch_ref"), 2e-2, 1e-5, "core/moe/moe_tkg/test_moe_tkg.py",
          ref_output=lambda r: r["out"], lnc=2, extra=True),
    _spec("", "core/moe_block", "moe_block_tkg", "moe_block_tkg", _moe_block_tkg,
          _ref("core/moe_block", "moe_block_tkg_torch", "moe_block_tkg_torch_ref"), 1e-2, 1e-5,
          "core/moe_block/test_moe_block_tkg.py", lnc=2, extra=True),
    # attention_tkg: the test's wrapper kernel (SBUF manager, outputs) is read from its test module; its torch
    # wrapper is a closure inside the test function, restated by _attention_tkg_reference.
    KernelSpec("nki-library core/attention/attention_tkg", "nki-library",
               f"{TESTS}/core/attention/test_attention_tkg.py", "attn_tkg_wrapper", CURRENT, _attention_tkg,
               LocalReference(_attention_tkg_reference, "attn_tkg_torch_wrapper in test_attention_tkg.py"), 1e-2, 1e-5,
               f"{TESTS}/core/attention/test_attention_tkg.py: rtol=1e-2, atol=1e-5 (no fp8 KV)", extract=True,
               criterion=Criterion.range, extra=True),
    # attention_block_tkg: the test's wrapper kernel (read from the test module) and its torch module
    # (restated call); the test itself compares with a cosine-similarity comparator at the same rtol.
    KernelSpec("nki-library experimental/transformer/attention_block_tkg", "nki-library",
               f"{TESTS}/experimental/transformer/test_attention_block_tkg.py",
               "attention_block_tkg_kernel_test_wrapper", CURRENT, _attention_block_tkg,
               LocalReference(_attention_block_tkg_reference, "AttentionBlockTkgTorchRef(lnc) in _golden_ref_via_torch"),
               0.015, 1e-5, f"{TESTS}/experimental/transformer/test_attention_block_tkg.py: _get_tolerances (bf16)",
               extract=True, criterion=Criterion.range, lnc=2, extra=True),
    KernelSpec("nki-library core/moe/moe_cte/moe_cte", "nki-library", f"{LIB}/core/moe/moe_cte/moe_cte.py", "moe_cte",
               CURRENT, _moe_cte, LocalReference(_moe_cte_reference, "moe_cte_torch_wrapper in test_moe_cte_common.py"),
               2e-2, 1e-5, f"{TESTS}/core/moe/moe_cte/test_moe_cte.py: rtol=2e-2, atol=1e-5 (not quantized)",
               module=f"{PKG}.core.moe.moe_cte.moe_cte", criterion=Criterion.range, lnc=2, extra=True),
    # transformer_tkg: the test's 4-layer wrapper kernel, read from its test module; its golden restated.
    KernelSpec("nki-library experimental/transformer/transformer_tkg", "nki-library",
               f"{TESTS}/experimental/transformer/test_transformer_tkg.py", "transformer_tkg_tp4_4layer_wrapper",
               CURRENT, _transformer_tkg,
               LocalReference(_transformer_tkg_reference, "create_lazy_golden in test_transformer_tkg.py"), 0.025,
               1e-2, f"{TESTS}/experimental/transformer/test_transformer_tkg.py: rel_tol 2.5 % / 100, abs_tol 1e-2",
               extract=True, criterion=Criterion.range, lnc=2, extra=True),
    # gen_mask_tkg is a subkernel on SBUF tensors: its test runs it through a wrapper in the test module
    # (HBM <-> SBUF copies) against an adapter of the torch reference; both are read from that file.
    KernelSpec("nki-library core/attention/gen_mask_tkg", "nki-library",
               f"{TESTS}/core/attention/test_gen_mask_tkg.py", "gen_mask_tkg_wrapper", CURRENT, _gen_mask_tkg,
               FileReference(f"{TESTS}/core/attention/test_gen_mask_tkg.py", "gen_mask_tkg_torch_ref_adapter",
                             torch_inputs=True), 0.0, 0.0,
               f"{TESTS}/core/attention/test_gen_mask_tkg.py: rtol=0, atol=0", extract=True,
               criterion=Criterion.range, extra=True),
    # router_topk's test runs the kernel through a wrapper function in its test module (it allocates the
    # outputs the kernel writes); both the wrapper and its torch counterpart are read from that file.
    KernelSpec("nki-library core/router_topk", "nki-library", f"{TESTS}/core/router_topk/test_router_topk_common.py",
               "router_topk_kernel_wrapper", CURRENT, _router_topk,
               FileReference(f"{TESTS}/core/router_topk/test_router_topk_common.py", "router_topk_torch_wrapper",
                             torch_inputs=True), 2e-2, 1e-5,
               f"{TESTS}/core/router_topk/test_router_topk.py: rtol=2e-2, atol=1e-5", extract=True,
               criterion=Criterion.range),
)
