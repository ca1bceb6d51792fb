# bf16 mixed precision (tests/reference/check_bf16.py, test_gemm_bf16.cpp):
#  - bf16_vs_fp32_vs_torch_autocast: 30 steps; twinkle --bf16 within 5e-3 (max relative loss
#    deviation) of twinkle --fp32 and at least as close to it as PyTorch's bf16 autocast is to PyTorch
#    fp32 (same model, init and batch); PyTorch with bf16 parameters and no fp32 master weights must
#    miss the tolerance (the test can fail);
#  - bf16_layout_*: tp2 / dp2 / tp2 pp2 dp2 sp under --bf16 against one process --bf16;
#  - gemm_bf16_without_bf16_isa: the bf16 GEMM unit tests with oneDNN capped below avx512_core_bf16
#    (the rounded-fp32 fallback of a CPU without bf16 instructions).
set(TWINKLE_PY ${TWINKLE_REF_RUN})
set(CHECK_BF16 ${CMAKE_SOURCE_DIR}/tests/reference/check_bf16.py)
add_test(NAME bf16_vs_fp32_vs_torch_autocast COMMAND ${TWINKLE_PY} ${CHECK_BF16} --build ${CMAKE_BINARY_DIR} --steps 30)
#  - bf16_layout_cp2_*: context parallelism, ring (attention_block's bf16 backward) and a2a (Ulysses: the flash
#    kernel's), against one process --bf16.
foreach(spec "tp2|2|--tp 2" "dp2|2|--dp 2" "tp2_pp2_dp2_sp|8|--tp 2 --pp 2 --dp 2 --sequence-parallel"
        "cp2_ring|2|--cp 2" "cp2_a2a|2|--cp 2 --cp-comm-type a2a")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  add_test(NAME bf16_layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_BF16} --build ${CMAKE_BINARY_DIR} --against single
           --steps 8 --np ${np} --layout "${flags}")
  set_tests_properties(bf16_layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
add_test(NAME gemm_bf16_without_bf16_isa COMMAND ${CMAKE_BINARY_DIR}/tests/test_gemm_bf16)
set_tests_properties(gemm_bf16_without_bf16_isa PROPERTIES ENVIRONMENT "DNNL_MAX_CPU_ISA=AVX512_CORE")
# checkpoint dtypes: bf16 checkpoint -> fp32 / bf16 training -> saved in the dtype asked for (or loaded in)
add_test(NAME save_dtype_bf16_roundtrip COMMAND ${TWINKLE_PY} ${CMAKE_SOURCE_DIR}/tests/reference/check_save_dtype.py
         --build ${CMAKE_BINARY_DIR})
