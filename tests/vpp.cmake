# Interleaved pipeline parallelism (virtual pipeline stages, parallel/pipeline_interleaved.h): every
# layout with vpp equals the one-process run of the same model and batch under the layout rule
# (check_train.py / check_train_moe.py / check_bf16.py --against single). Tied embeddings (variant
# a: the embedding on rank 0's first chunk, its copy on rank p-1's last), untied with biases (b),
# pp2 x vpp3 on 6 layers, pp4 x vpp2 on 8 layers, with tp + sequence parallelism, dp, cp, LoRA with
# dropout, overlapped dp communication, selective recompute, a step whose micro-batches are padded
# with empty ones to a multiple of pp (6 on pp4), Megatron's --num-layers-per-virtual-pipeline-stage
# spelling, Megatron's explicit --pipeline-model-parallel-layout (uneven virtual stages, vpp from its
# stage count), a MoE layout whose first chunk holds no experts, and bf16 against its own one-process run.
set(CHECK_TRAIN_VPP ${CMAKE_SOURCE_DIR}/tests/reference/check_train.py)
set(CHECK_TRAIN_MOE_VPP ${CMAKE_SOURCE_DIR}/tests/reference/check_train_moe.py)
set(CHECK_BF16_VPP ${CMAKE_SOURCE_DIR}/tests/reference/check_bf16.py)
# name | ranks | check flags | layout flags
set(TWINKLE_VPP_LAYOUTS
  "pp2_vpp2_tied|2|--variant a --layers 4 --batch rows:8 --mbs 1|--pp 2 --virtual-pipeline-stages 2"
  "pp2_vpp3_6_layers|2|--variant b --layers 6 --batch rows:8 --mbs 2|--pp 2 --virtual-pipeline-stages 3"
  "pp4_vpp2_8_layers|4|--variant a --layers 8 --batch rows:8 --mbs 1|--pp 4 --virtual-pipeline-stages 2"
  "pp4_vpp2_padded_6_micro_batches|4|--variant b --layers 8 --batch rows:6 --mbs 1|--pp 4 --virtual-pipeline-stages 2"
  "tp2_pp2_vpp2_sp|4|--variant b --layers 4 --batch rows:8 --mbs 1|--tp 2 --pp 2 --virtual-pipeline-stages 2 --sequence-parallel"
  "pp2_dp2_vpp2_overlap|4|--variant a --layers 4 --batch rows:8 --mbs 1|--pp 2 --dp 2 --virtual-pipeline-stages 2 --overlap-grad-reduce --overlap-param-gather"
  "cp2_pp2_vpp2|4|--variant a --layers 4 --batch rows:8 --mbs 2|--cp 2 --pp 2 --virtual-pipeline-stages 2"
  "pp2_vpp2_lora_dropout|2|--variant a --layers 4 --batch rows:8 --mbs 1 --lora-r 4 --lora-dropout 0.1|--pp 2 --virtual-pipeline-stages 2"
  "pp2_vpp2_selective_recompute|2|--variant b --layers 4 --batch rows:8 --mbs 1|--pp 2 --virtual-pipeline-stages 2 --recompute-granularity selective"
  "pp2_layers_per_virtual_stage_1|2|--variant a --layers 4 --batch rows:8 --mbs 1|--pp 2 --num-layers-per-virtual-pipeline-stage 1")
foreach(spec ${TWINKLE_VPP_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  list(GET parts 3 layout)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME vpp_layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_VPP} --build ${CMAKE_BINARY_DIR} ${flag_list}
           --steps 3 --against single --np ${np} --layout "${layout}")
  set_tests_properties(vpp_layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
# Megatron's layout string (its '|' is this file's list separator, so a test of its own): 6 layers as
# [E t t | t | t t | t L] over pp2, vpp 2 read off the four stages.
add_test(NAME vpp_layout_pp2_megatron_layout_uneven_6_layers
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN_VPP} --build ${CMAKE_BINARY_DIR} --variant b --layers 6 --batch rows:8 --mbs 1
                 --steps 3 --against single --np 2 --layout "--pp 2 --pipeline-model-parallel-layout Et*2|t|tt|tL")
set_tests_properties(vpp_layout_pp2_megatron_layout_uneven_6_layers PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Qwen3-MoE pp2 x ep2 x vpp2 (dp2): layer 0 dense, so rank 0's first chunk holds no expert; the
# per-layer aux loss and z-loss summed over both chunks of each rank.
add_test(NAME vpp_moe_layout_pp2_dp2_ep2_vpp2_first_chunk_dense
         COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE_VPP} --build ${CMAKE_BINARY_DIR} --steps 3 --layers 4
                 --mlp-only-layers 0 --batch rows:8 --aux-coef 0.1 --aux-type per_layer --z-coef 0.01 --np 4
                 --layout "--pp 2 --dp 2 --ep 2 --virtual-pipeline-stages 2")
set_tests_properties(vpp_moe_layout_pp2_dp2_ep2_vpp2_first_chunk_dense PROPERTIES TIMEOUT 300 PROCESSORS 2)
add_test(NAME vpp_bf16_layout_pp2_vpp2 COMMAND ${TWINKLE_PY} ${CHECK_BF16_VPP} --build ${CMAKE_BINARY_DIR} --against single
         --steps 8 --layers 4 --np 2 --layout "--pp 2 --virtual-pipeline-stages 2")
set_tests_properties(vpp_bf16_layout_pp2_vpp2 PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Resume across virtual pipeline layouts (check_resume.py; the checkpoint holds full HF tensors):
# saved on pp2 x vpp2 and resumed bit-identically on it, then on one process and on plain pp2
# within the resharding rule; and back, saved on pp2 and resumed on pp2 x vpp2.
twinkle_resume_test(exact_pp2_vpp2_dense_reshard 2 --np 2 --layout "--pp 2 --virtual-pipeline-stages 2"
                    --reshard "1:,2:--pp 2")
twinkle_resume_test(exact_pp2_dense_reshard_to_vpp2 2 --np 2 --layout "--pp 2"
                    --reshard "2:--pp 2 --virtual-pipeline-stages 2")
# The Python recipe on an interleaved pipeline: examples/python/tp.py with DeviceMesh vpp_size=2 (its --vpp)
# vs examples/tp_recipe --vpp 2 on pp2 (loss / grad norm / lr per step, checkpoint bytes).
if(TARGET twinkle_python)
  add_test(NAME python_tp_pp2_vpp2_equals_cpp_recipe
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --rows 16 --precision fp32 --np 2 --layout "--dp 1 --tp 1 --pp 2 --vpp 2")
  set_tests_properties(python_tp_pp2_vpp2_equals_cpp_recipe PROPERTIES TIMEOUT 600 PROCESSORS 2)
endif()
# A sharded checkpoint (io/sharded_checkpoint.h: each rank's own slices) saved on pp2 x dp2 x vpp2 with
# ZeRO cuts inside rows (1000-byte buckets): resumed bit-identically on it, and on one process, plain
# pp2 and dp4 within the resharding rule.
twinkle_sharded_resume_test(exact_pp2_dp2_vpp2_dense_reshard 4 --np 4
                            --layout "--pp 2 --dp 2 --virtual-pipeline-stages 2 --bucket-size 1000"
                            --reshard "1:,2:--pp 2,4:--dp 4")
