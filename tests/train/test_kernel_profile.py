"""Where a training step's time goes: kernels and operators sorted into kinds, and a profile of
real steps (on the CPU: operators by their own time)."""

import pytest
import torch

from xdllm.train.kernel_profile import kernel_kind, profile_steps

CUDA_KERNELS = {  # names as the CUDA profiler lists them (abridged where long)
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off": "matmul",
    "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTN": "matmul",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn": "matmul",
    "triton_tem_fused_mm_3": "matmul",
    "triton_tem_fused_flex_attention_0": "attention",
    "triton_tem_fused_flex_attention_backward_1": "attention",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>": "attention",
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "attention",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>": "loss",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>": "norm",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>": "cast_copy",
    "Memcpy HtoD (Pageable -> Device)": "cast_copy",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>": "elementwise",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::sum_functor>>": "elementwise",
    "triton_poi_fused_add_mul_0": "elementwise",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>": "optimizer",
}


@pytest.mark.parametrize("name, kind", sorted(CUDA_KERNELS.items()))
def test_cuda_kernels_fall_in_their_kind(name, kind):
    assert kernel_kind(name) == kind


def test_cpu_operators_fall_in_their_kind():
    assert [kernel_kind(name) for name in ("aten::mm", "aten::addmm", "aten::_fused_adamw_", "aten::_log_softmax",
                                           "aten::_fused_rms_norm", "aten::_to_copy", "aten::mul", "aten::view",
                                           "aten::linear", "aten::topk")] == [
        "matmul", "matmul", "optimizer", "loss", "norm", "cast_copy", "elementwise", "host", "host", "other"]


def test_a_profile_of_training_steps_shares_their_time_among_the_kinds():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    optimizer = torch.optim.AdamW(model.parameters())
    data = torch.randn(128, 64)

    def step() -> None:
        torch.nn.functional.cross_entropy(model(data), torch.arange(128) % 64).backward()
        optimizer.step()
        optimizer.zero_grad()

    profile = profile_steps(step, 3, torch.device("cpu"), top=5)
    assert profile["steps"] == 3 and profile["timed"] == "CPU operators (own time)" and profile["ms_per_step"] > 0
    assert sum(profile["kinds"].values()) == pytest.approx(1.0)
    assert {"matmul", "loss", "elementwise"} <= set(profile["kinds"])
    assert list(profile["kinds"].values()) == sorted(profile["kinds"].values(), reverse=True)
    assert len(profile["top"]) == 5
    assert [entry["share"] for entry in profile["top"]] == sorted((e["share"] for e in profile["top"]), reverse=True)
    assert all(entry["kind"] == kernel_kind(entry["name"]) for entry in profile["top"])
