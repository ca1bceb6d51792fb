# LoRA against independent references (tests/reference/check_train.py --lora-r,
# tests/reference/lora_ref.py: PEFT's formulas on the PyTorch reference model, the initial
# adapter read through PEFT's key names and config fields):
#  - one process vs PyTorch float64: loss and grad norm every step, step-0 adapter gradients,
#    the adapter after AdamW steps (every element within the float32-rounding bound that AdamW can
#    make of an accepted gradient error, derived from the float64 run and met by PyTorch float32 too:
#    check_train.compare_adapter_f64), the saved adapter_config.json, merged vs unmerged held-out
#    loss; with and without rslora, subsets;
#  - every layout vs the single-process LoRA run (with lora_dropout 0.1 but on tp2; under cp the
#    masks' token keys follow the tokens through the load-balanced split).
set(TWINKLE_PY ${TWINKLE_REF_RUN})
set(CHECK_TRAIN ${CMAKE_SOURCE_DIR}/tests/reference/check_train.py)
set(LORA_FLAGS --lora-r 4 --lora-alpha 8)

add_test(NAME lora_vs_torch_untied_bias COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --steps 4 ${LORA_FLAGS})
add_test(NAME lora_vs_torch_rslora_tied_gqa COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --steps 4 ${LORA_FLAGS} --lora-rslora)
# lora_dropout 0.1: twinkle's masks (test hook TWINKLE_TEST_LORA_DROPOUT_DUMP) fed to the PyTorch
# reference, which applies PEFT's dropout(x) before A with them; mask statistics checked too.
add_test(NAME lora_vs_torch_dropout COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --steps 3 ${LORA_FLAGS} --lora-dropout 0.1)
add_test(NAME lora_vs_torch_targets_kaiming_init COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --steps 3 --lora-r 8 --lora-alpha 32 --lora-targets q_proj,v_proj,down_proj --lora-init true)

# name | ranks | variant | flags [| extra LoRA flags: with dropout the masks are keyed by global row,
# position and feature, so every layout must equal one process exactly as without]
set(TWINKLE_LORA_LAYOUTS
  "tp2|2|b|--tp 2"
  "tp2_sp|2|a|--tp 2 --sequence-parallel|--lora-dropout 0.1"
  "pp2|2|a|--pp 2|--lora-dropout 0.1"
  "dp2_zero1|2|b|--dp 2|--lora-dropout 0.1"
  "cp2_p2p|2|b|--cp 2|--lora-dropout 0.1"
  "tp2_cp2_sp|4|b|--tp 2 --cp 2 --sequence-parallel|--lora-dropout 0.1"
  "tp2_pp2_dp2|8|b|--tp 2 --pp 2 --dp 2 --sequence-parallel|--lora-dropout 0.1")
foreach(spec ${TWINKLE_LORA_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(GET parts 3 flags)
  set(extra "")
  list(LENGTH parts nparts)
  if(nparts GREATER 4)
    list(GET parts 4 extra)
    separate_arguments(extra)
  endif()
  add_test(NAME lora_layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant ${variant}
           --layers 4 --batch rows:8 --mbs 1 --steps 3 --against single --np ${np} --layout "${flags}" ${LORA_FLAGS} ${extra})
  set_tests_properties(lora_layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()

# `twinkle export --merge` / `generate --adapter` / `eval --adapter`: the merged HF directory and the
# unmerged adapter give the same held-out loss as PyTorch float64 with PEFT's formulas (1e-5 rel), in
# twinkle and in the reference; greedy generation equals the reference's with the adapter attached.
add_test(NAME lora_export_merge_generate
         COMMAND ${TWINKLE_PY} ${CMAKE_SOURCE_DIR}/tests/reference/check_lora_export.py --build ${CMAKE_BINARY_DIR}
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny)

# Qwen3-MoE (tests/reference/check_train_moe.py --lora-r: lora_ref.py on qwen3_moe_ref.py, whose
# experts are per-expert nn.Linear as in transformers 4): all-linear + the router "gate" = attention,
# the dense layer's MLP, the router and one LoRA pair per expert and projection (grouped GEMM path),
# with the aux and z losses vs PyTorch float64; attention + router alone with pp2 x dp2.
set(CHECK_TRAIN_MOE ${CMAKE_SOURCE_DIR}/tests/reference/check_train_moe.py)
set(MOE_LORA --lora-r 4 --lora-targets all-linear,gate)
add_test(NAME lora_moe_vs_torch_experts_router COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_LORA} --aux-coef 0.01 --z-coef 0.001 --steps 3)
# use_rslora on the MoE model (experts included): scaling lora_alpha / sqrt(r) = 8 / 2 = 4 (PEFT's
# plain alpha / r would be 2), read back from adapter_config.json by the reference. lora_dropout on
# the experts (masks keyed by the routed rows' tokens, dumped by twinkle and fed to the reference's
# per-expert nn.Linear rows in torch.where order) and partial expert targeting (PEFT's suffix match:
# experts.1.gate_proj / experts.4.down_proj get pairs, the other experts' gate / down projections none).
# Why lr 2e-4 here (measured 2026-11-30): at lr 1e-3 the step-2..3 grad norms of PyTorch float32
# and twinkle alike sit 2e-6 - 1.2e-5 from float64 on these runs (AdamW amplifies float32 gradient
# rounding of elements whose gradient is near eps into parameter differences ~ lr; from the same
# step-1 adapter twinkle's gradient norm is 2.2e-6 off float64, PyTorch float32's 1.1e-6), so 1e-5
# per step is not a fair bound there; at 2e-4 both stay <= 2e-6 (the error scales with lr).
set(MOE_LORA_LR --aux-coef 0.01 --z-coef 0.001 --steps 3 --lr 2e-4)
add_test(NAME lora_moe_vs_torch_rslora COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_LORA} --lora-alpha 8 --lora-rslora ${MOE_LORA_LR})
add_test(NAME lora_moe_vs_torch_expert_dropout COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_LORA} --lora-dropout 0.1 ${MOE_LORA_LR})
add_test(NAME lora_moe_vs_torch_partial_experts COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         --lora-r 4 --lora-targets q_proj,experts.1.gate_proj,experts.4.down_proj,up_proj,gate --lora-dropout 0.1
         ${MOE_LORA_LR})
add_test(NAME lora_moe_layout_dp2_pp2 COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         --lora-r 4 --aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:8 --layers 4 --steps 3
         --np 4 --layout "--dp 2 --pp 2")
set_tests_properties(lora_moe_layout_dp2_pp2 PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Every MoE LoRA layout compares every adapter element with one process within 1% of steps * lr, as the
# dense LoRA layouts (check_train.compare_params_strict; measured margins in check_train_moe.py).
# expert parallelism vs one process: the expert pairs live with their experts (ep2: three of the six
# experts' pairs per rank), reduced over expert-dp (dp4 x ep2: edp 2); tp2 x ep2 also runs the
# router's pair on each tp rank's sequence-parallel shard (gradients summed over tp); and the
# 8-rank tp2 pp2 dp2 ep2 mesh.
set(TWINKLE_LORA_MOE_LAYOUTS "ep2|2|--ep 2" "dp4_ep2|4|--dp 4 --ep 2" "tp2_ep2|2|--tp 2 --ep 2"
    "tp2_pp2_dp2_ep2|8|--tp 2 --pp 2 --dp 2 --ep 2")
foreach(spec ${TWINKLE_LORA_MOE_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  add_test(NAME lora_moe_layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
           ${MOE_LORA} --aux-coef 0.01 --z-coef 0.001 --aux-type per_layer --layers 4 --batch rows:8 --mbs 1
           --steps 3 --np ${np} --layout "${flags}")
  set_tests_properties(lora_moe_layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
# lora_dropout on attention, the router and the experts: ep2 with partial expert targets (expert 1's
# gate_proj pair on ep rank 0, expert 4's down_proj pair on rank 1; the rows' token keys travel with
# the rows through the alltoall), tp2 x ep2 (the router's and experts' rows are each tp rank's SP
# shard, keyed by those tokens' global identities) and cp2 x ep2 (keys through the cp split).
set(MOE_DROP --lora-r 4 --lora-dropout 0.1 --aux-coef 0.01 --aux-type per_layer --layers 4 --batch rows:8 --mbs 1 --steps 3)
add_test(NAME lora_moe_layout_ep2_partial_dropout COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_DROP} --lora-targets q_proj,experts.1.gate_proj,experts.4.down_proj,up_proj,gate --np 2 --layout "--ep 2")
add_test(NAME lora_moe_layout_tp2_ep2_dropout COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_DROP} --lora-targets all-linear,gate --np 2 --layout "--tp 2 --ep 2")
add_test(NAME lora_moe_layout_cp2_ep2_dropout COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR}
         ${MOE_DROP} --lora-targets all-linear,gate --np 2 --layout "--cp 2 --ep 2")
set_tests_properties(lora_moe_layout_ep2_partial_dropout lora_moe_layout_tp2_ep2_dropout lora_moe_layout_cp2_ep2_dropout
                     PROPERTIES TIMEOUT 300 PROCESSORS 2)
# PEFT directory of a MoE adapter trained on ep2 (every expert's pair gathered, targets spelled out
# so PEFT leaves the router alone), read back by the reference and by `twinkle eval --adapter`, and
# `twinkle export --merge` (tests/reference/check_lora_export.py --moe).
add_test(NAME lora_moe_export_merge
         COMMAND ${TWINKLE_PY} ${CMAKE_SOURCE_DIR}/tests/reference/check_lora_export.py --build ${CMAKE_BINARY_DIR}
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny --moe)
set_tests_properties(lora_moe_export_merge PROPERTIES TIMEOUT 300 PROCESSORS 2)
