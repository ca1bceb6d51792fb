# tests/moe.cmake — Qwen3-MoE pieces: the MoE CPU kernels vs PyTorch float64 (references from
# tests/reference/moe_kernels_ref.py, semantics of tests/reference/qwen3_moe_ref.py), the
# reference model's own selftest, and the expert-parallel alltoall dispatcher on 2 and 4 ranks.
set(TWINKLE_MOE_REF_DIR ${CMAKE_BINARY_DIR}/moe_kernels_ref)
add_executable(torch_ref_moe ${CMAKE_SOURCE_DIR}/tests/unit/kernels/torch_ref_moe.cpp)
set_target_properties(torch_ref_moe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(torch_ref_moe PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(torch_ref_moe PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)

add_test(NAME moe_kernels_ref_data
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/moe_kernels_ref.py --out ${TWINKLE_MOE_REF_DIR})
set_tests_properties(moe_kernels_ref_data PROPERTIES FIXTURES_SETUP moe_kernels_ref TIMEOUT 120)
gtest_discover_tests(torch_ref_moe DISCOVERY_TIMEOUT 60
                     PROPERTIES FIXTURES_REQUIRED moe_kernels_ref
                                ENVIRONMENT "MOE_KERNELS_REF_DIR=${TWINKLE_MOE_REF_DIR};TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# The MoE block itself with fixed router logits (router weight [I|0], hand-chosen logits with
# ties): combine weights, selection, output and gradients vs PyTorch, norm_topk_prob on and off.
add_executable(moe_block_fixed_router ${CMAKE_SOURCE_DIR}/tests/unit/model/torch_ref_moe_block.cpp)
set_target_properties(moe_block_fixed_router PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(moe_block_fixed_router PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(moe_block_fixed_router PRIVATE twinkle_model nlohmann_json::nlohmann_json GTest::gtest)
gtest_discover_tests(moe_block_fixed_router DISCOVERY_TIMEOUT 60
                     PROPERTIES FIXTURES_REQUIRED moe_kernels_ref
                                ENVIRONMENT "MOE_KERNELS_REF_DIR=${TWINKLE_MOE_REF_DIR};TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# The reference Qwen3-MoE against independent formulations (dense expert sum, padding removal,
# balanced-load values).
add_test(NAME moe_reference_selftest
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "qwen3_moe_ref selftest: all ok"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/qwen3_moe_ref.py selftest)
# check_run.sh: exit code 0 AND the line (a pass regex would ignore the exit code)
set_tests_properties(moe_reference_selftest PROPERTIES TIMEOUT 120)

# Expert parallelism: the EP block (alltoall dispatcher) == the single-process block on ep=2
# (2 ranks), ep=4 (4 ranks) and ep=2 on 4 ranks (two EP groups, edp=2).
add_executable(moe_ep_check ${CMAKE_SOURCE_DIR}/tests/dist/moe_ep_check.cpp)
set_target_properties(moe_ep_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(moe_ep_check PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(moe_ep_check PRIVATE twinkle_parallel)
foreach(cfg "2;2" "4;4" "4;2")
  list(GET cfg 0 np)
  list(GET cfg 1 ep)
  add_test(NAME moe_ep_dispatch_np${np}_ep${ep}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "moe_ep_check OK .*"
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   --mca mpi_yield_when_idle 1 -np ${np} ${CMAKE_BINARY_DIR}/tests/moe_ep_check ${ep})
  set_tests_properties(moe_ep_dispatch_np${np}_ep${ep} PROPERTIES TIMEOUT 90
                       ENVIRONMENT "OMP_NUM_THREADS=1;LOG_LEVEL=INFO" FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()

# Megatron's per-layer aux loss and z-loss with the tokens split over 2 and 3 ranks == one
# process (values, router-logit and router-weight gradients, padding excluded).
add_executable(moe_aux_check ${CMAKE_SOURCE_DIR}/tests/dist/moe_aux_check.cpp)
set_target_properties(moe_aux_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(moe_aux_check PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(moe_aux_check PRIVATE twinkle_parallel)
foreach(np 2 3)
  add_test(NAME moe_aux_split_np${np}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "moe_aux_check OK .*"
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   --mca mpi_yield_when_idle 1 -np ${np} ${CMAKE_BINARY_DIR}/tests/moe_aux_check)
  set_tests_properties(moe_aux_split_np${np} PROPERTIES TIMEOUT 90 ENVIRONMENT "OMP_NUM_THREADS=1;LOG_LEVEL=INFO"
                       FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()

# Qwen3-MoE training in one process vs tests/reference/qwen3_moe_ref.py step (float64):
# loss / grad norm / lm / aux / z / expert load per step, step-0 gradients, params after AdamW
# (tests/reference/check_train_moe.py). Layer 1 is an mlp_only_layers (dense) layer; rows:6 in
# micro-batches of 2 are right-padded (padding excluded from the router statistics).
set(CHECK_TRAIN_MOE ${CMAKE_SOURCE_DIR}/tests/reference/check_train_moe.py)
# name | flags
set(TWINKLE_MOE_TRAIN
  "norm_topk_aux_off|--norm-topk-prob true"
  "raw_topk_aux_off|--norm-topk-prob false"
  "norm_topk_aux_global|--norm-topk-prob true --aux-coef 0.1 --aux-type global"
  "raw_topk_aux_global_z|--norm-topk-prob false --aux-coef 0.05 --aux-type global --z-coef 0.01 --mbs 3"
  "norm_topk_aux_per_layer|--norm-topk-prob true --aux-coef 0.1 --aux-type per_layer --mbs 1")
foreach(spec ${TWINKLE_MOE_TRAIN})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME moe_train_vs_torch_${name}
           COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR} ${flag_list})
  set_tests_properties(moe_train_vs_torch_${name} PROPERTIES TIMEOUT 300)
endforeach()

# One test per "name | ranks | flags of the check | layout flags" spec: check_train_moe.py --layout
# (the layout vs one process), named PREFIX<name>, with FIXED (flags of every test of the list)
# before the spec's own flags.
function(twinkle_moe_layout_tests prefix fixed)
  separate_arguments(fixed_list UNIX_COMMAND "${fixed}")
  foreach(spec ${ARGN})
    string(REPLACE "|" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 flags)
    list(GET parts 3 layout)
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
    add_test(NAME ${prefix}${name}
             COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR} ${fixed_list} ${flag_list}
                     --np ${np} --layout "${layout}")
    set_tests_properties(${prefix}${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
  endforeach()
endfunction()

# Qwen3-MoE layouts == one process (check_train_moe.py --layout): loss, grad norm and its
# expert part, lm / aux / z loss, expert load per step, final parameters. Pipeline stages (MoE
# and dense layers on different stages); data parallelism with ZeRO-1 on the dense (dp-cp) and
# the expert (expert-dp) region; tp = 2 where sequence parallelism is switched on for MoE
# (each tp rank routes its token shard; rows:5 in one micro-batch pads the token count to a
# multiple of tp; experts reduced over expert-dp = the tp group); expert parallelism with
# Megatron's alltoall dispatcher per (layer, slot): ep2 over dp (edp 1), ep2 over tp, ep2 with
# edp 2 (dp4: ZeRO shards experts over edp), ep4 over tp x dp, ep2 with pp, and the cookbook's
# recipe-2 grid tp2 pp2 dp2 ep2 on 8 ranks; a short last batch (5 rows, batch 4) whose second
# step leaves dp rank 1 without a row: it runs a filler micro-batch so every ep dispatch meets.
# With context parallelism (the cookbook's MoE + CP recipe): cp2 x ep2 (the ep group is the cp group; each
# cp rank routes its load-balanced half of every sequence; router statistics summed over cp) and
# the MoE + CP recipe's grid tp2 pp2 cp2 ep2 on 8 ranks (ep = the tp groups, edp = the cp groups),
# aux per_layer on and off.
# Expert tensor parallelism (etp 2: each expert's gate/up split by rows, down by columns over the
# etp group; the dispatcher all-gathers the etp group's rows and reduce-scatters the outputs):
# etp2 x ep2 on tp2 dp2 (edp 1), etp2 alone on dp2 (ep 1), etp2 with edp 2 (ZeRO over edp on
# the etp slices) and with pp2 (the saved experts gathered from both etp ranks of each stage);
# a short last batch under etp alone (ep 1): the etp collectives need the filler micro-batch too;
# and the MoE recipe's grid with etp2 on 8 ranks: tp2 pp2 dp2 ep2 etp2 (per stage the etp
# groups are the tp groups, the ep groups the dp groups, edp 1) and tp2 pp2 dp2 etp2 (ep 1, the
# experts ZeRO-sharded over edp 2).
# name | ranks | flags of the check | layout flags
set(TWINKLE_MOE_LAYOUTS
  "pp2_aux_per_layer|2|--aux-coef 0.1 --aux-type per_layer|--pp 2"
  "dp2_aux_global|2|--aux-coef 0.1 --aux-type global --batch rows:8|--dp 2"
  "dp2_pp2_z|4|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:8 --layers 4|--dp 2 --pp 2"
  "tp2_auto_sp_aux_per_layer_z|2|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:5 --mbs 5|--tp 2"
  "ep2_dp2_aux_off|2|--batch rows:8|--dp 2 --ep 2"
  "ep2_short_batch_filler|2|--aux-coef 0.1 --aux-type per_layer --z-coef 0.01 --batch rows:5 --batch-size 4 --mbs 1 --steps 2|--dp 2 --ep 2"
  "tp2_ep2_aux_global|2|--aux-coef 0.1 --aux-type global --batch rows:5 --mbs 5|--tp 2 --ep 2"
  "dp4_ep2_zero_aux_global|4|--aux-coef 0.1 --aux-type global --batch rows:8|--dp 4 --ep 2"
  "tp2_dp2_ep4|4|--experts 8 --aux-coef 0.1 --aux-type per_layer --batch rows:8|--tp 2 --dp 2 --ep 4"
  "pp2_dp2_ep2_z|4|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:8 --layers 4|--pp 2 --dp 2 --ep 2"
  "tp2_pp2_dp2_ep2_aux_per_layer|8|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:8 --layers 4|--tp 2 --pp 2 --dp 2 --ep 2"
  "cp2_ep2_aux_global_z|2|--aux-coef 0.1 --aux-type global --z-coef 0.01 --batch rows:4|--cp 2 --ep 2"
  "cp2_ep2_bf16|2|--train-flags=--bf16 --bf16-rule --aux-coef 0.1 --aux-type global --batch rows:4|--cp 2 --ep 2"
  "tp2_pp2_cp2_ep2_aux_per_layer|8|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:4 --layers 4|--tp 2 --pp 2 --cp 2 --ep 2"
  "tp2_pp2_cp2_ep2_aux_off|8|--batch rows:4 --layers 4|--tp 2 --pp 2 --cp 2 --ep 2"
  "tp2_dp2_etp2_ep2_aux_per_layer_z|4|--aux-coef 0.1 --aux-type per_layer --z-coef 0.01 --batch rows:8|--tp 2 --dp 2 --ep 2 --etp 2"
  "dp2_etp2_aux_global|2|--aux-coef 0.1 --aux-type global --batch rows:8|--dp 2 --etp 2"
  "dp4_etp2_zero_aux_off|4|--batch rows:8|--dp 4 --etp 2"
  "dp2_etp2_short_batch_filler|2|--aux-coef 0.1 --aux-type per_layer --z-coef 0.01 --batch rows:5 --batch-size 4 --mbs 1 --steps 2|--dp 2 --etp 2"
  "pp2_dp2_etp2_aux_per_layer|4|--aux-coef 0.05 --aux-type per_layer --batch rows:8 --layers 4|--pp 2 --dp 2 --etp 2"
  "tp2_pp2_dp2_etp2_ep2_aux_per_layer|8|--aux-coef 0.05 --aux-type per_layer --z-coef 0.01 --batch rows:8 --layers 4|--tp 2 --pp 2 --dp 2 --ep 2 --etp 2"
  "tp2_pp2_dp2_etp2_aux_off|8|--batch rows:8 --layers 4|--tp 2 --pp 2 --dp 2 --etp 2")
twinkle_moe_layout_tests(moe_layout_ "--steps 3" ${TWINKLE_MOE_LAYOUTS})

# Packed rows under expert parallelism, against the one-process run of the same micro-batches
# unpacked (check_train_moe.py --packed-layout): padding and document boundaries must not enter the
# router statistics (aux / z loss, expert load) or the token counts. Lengths 1..29, row 1 = row 0.
set(TWINKLE_MOE_PACKED_LAYOUTS
  "dp2_ep2_aux_per_layer_z|2|--aux-coef 0.1 --aux-type per_layer --z-coef 0.01|--dp 2 --ep 2"
  "tp2_sp_ep2_aux_global|2|--aux-coef 0.1 --aux-type global|--tp 2 --ep 2"
  "cp2_ep2_aux_global_z|2|--aux-coef 0.1 --aux-type global --z-coef 0.01|--cp 2 --ep 2")
twinkle_moe_layout_tests(moe_layout_packed_vs_unpacked_ "--steps 3 --batch rows:8:1:29:dup --mbs 4 --packed-layout" ${TWINKLE_MOE_PACKED_LAYOUTS})

# Experts and whole ep ranks without a row (check_train_moe.py --rig-router: every token picks
# experts 0 and 1): one process vs PyTorch float64 (the idle experts' step-0 gradients exactly 0,
# expert_load_min 0 every step), and layouts vs one process: ep2 (ep rank 1 gets nothing), ep4 of
# 8 experts (three idle ep ranks), etp2 with and without ep2, bf16, expert LoRA.
add_test(NAME moe_train_vs_torch_rigged_router_idle_experts
         COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR} --steps 3 --rig-router
                 --aux-coef 0.1 --aux-type global --z-coef 0.01)
set_tests_properties(moe_train_vs_torch_rigged_router_idle_experts PROPERTIES TIMEOUT 300)
set(TWINKLE_MOE_RIGGED_LAYOUTS
  "dp2_ep2|2|--aux-coef 0.1 --aux-type global|--dp 2 --ep 2"
  "dp4_ep4|4|--experts 8 --aux-coef 0.1 --aux-type per_layer --z-coef 0.01|--dp 4 --ep 4"
  "tp2_dp2_ep2_etp2|4|--aux-coef 0.1 --aux-type per_layer|--tp 2 --dp 2 --ep 2 --etp 2"
  "dp2_etp2|2|--aux-coef 0.1 --aux-type global|--dp 2 --etp 2"
  "dp2_ep2_bf16|2|--train-flags=--bf16 --aux-coef 0.1 --aux-type global|--dp 2 --ep 2"
  "dp2_ep2_expert_lora|2|--lora-r 4 --lora-alpha 1 --lora-targets all-linear --aux-coef 0.1 --aux-type global|--dp 2 --ep 2")
twinkle_moe_layout_tests(moe_layout_rigged_router_idle_experts_ "--steps 3 --rig-router --batch rows:8" ${TWINKLE_MOE_RIGGED_LAYOUTS})
# On a CPU with AMX (oneDNN ISA avx512_core_amx) oneDNN's bf16 matmul sums a row's products in an order
# that depends on the GEMM's shape, and the rigged router gives the two busy experts different row counts
# in one process and on dp2 ep2: step 3 then differs by 6.6e-5 in the expert grad norm (loss 6.59169266 vs
# 6.59169951), above the 1e-5 layout rule; capped at avx512_core_bf16 (and on CPUs without AMX) the layout
# stays within it. Pinned there until the bf16 GEMMs give a row the same sums whatever the shape.
set_tests_properties(moe_layout_rigged_router_idle_experts_dp2_ep2_bf16 PROPERTIES
                     ENVIRONMENT "DNNL_MAX_CPU_ISA=AVX512_CORE_BF16")

# Uneven pipeline splits: which layers are sparse follows the global layer index (a stage-local
# index would put the dense layer elsewhere and rename the tensors).
add_test(NAME moe_layout_pp2_split_1_3_dense_layers_0_2
         COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR} --steps 3 --layers 4 --batch rows:8
                 --mlp-only-layers 0,2 --aux-coef 0.1 --aux-type per_layer --np 2 --layout "--pp 2 --layers-per-stage 1,3")
add_test(NAME moe_layout_pp2_split_3_1_dense_layers_1_3
         COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_MOE} --build ${CMAKE_BINARY_DIR} --steps 3 --layers 4 --batch rows:8
                 --mlp-only-layers 1,3 --aux-coef 0.1 --aux-type per_layer --z-coef 0.01 --np 2
                 --layout "--pp 2 --layers-per-stage 3,1")
set_tests_properties(moe_layout_pp2_split_1_3_dense_layers_0_2 moe_layout_pp2_split_3_1_dense_layers_1_3
                     PROPERTIES TIMEOUT 300 PROCESSORS 2)

# Pipeline stages without experts (Qwen3-MoE mlp_only_layers covering a whole stage; every
# "first k layers dense" model): such a stage holds no expert tensor, no router and no expert
# LoRA pair, yet every collective it joins must have the count the config and the mesh give (the
# grad norm's world all-reduce once sent 1 double from the dense stage and 2 from the MoE one:
# MPI_ERR_TRUNCATE at the first step). The dense stage first and last, on pp2, pp2 x dp2,
# pp2 x dp2 x ep2 and the cookbook's tp2 pp2 dp2 ep2; with LoRA all-linear, without the distributed
# optimizer and with overlapped gradient reduction. Adapter stores that are empty on some ranks:
# LoRA on layer 0 only (stage 1 holds no pair) and on expert 0 only (ep rank 1 holds no pair;
# the dense region of the store was 0 long where expert 0 lives and one block long elsewhere,
# so the dp-cp bucket collectives differed and the step hung).
# name | ranks | flags of the check | layout flags
set(TWINKLE_MOE_DENSE_STAGE_LAYOUTS
  "pp2_first_stage_dense_aux_per_layer|2|--layers 2 --mlp-only-layers 0 --aux-coef 0.1 --aux-type per_layer|--pp 2"
  "pp2_last_stage_dense_aux_per_layer_z|2|--layers 2 --mlp-only-layers 1 --aux-coef 0.1 --aux-type per_layer --z-coef 0.01|--pp 2"
  "pp2_dp2_first_stage_dense|4|--layers 4 --mlp-only-layers 0,1 --batch rows:8 --aux-coef 0.1 --aux-type per_layer|--pp 2 --dp 2"
  "pp2_dp2_ep2_last_stage_dense_z|4|--layers 4 --mlp-only-layers 2,3 --batch rows:8 --aux-coef 0.05 --aux-type per_layer --z-coef 0.01|--pp 2 --dp 2 --ep 2"
  "tp2_pp2_dp2_ep2_first_stage_dense|8|--layers 4 --mlp-only-layers 0,1 --batch rows:8 --aux-coef 0.05 --aux-type per_layer|--tp 2 --pp 2 --dp 2 --ep 2"
  "pp2_dp2_ep2_first_stage_dense_lora_all_linear|4|--layers 4 --mlp-only-layers 0,1 --batch rows:8 --aux-coef 0.1 --aux-type per_layer --lora-r 4 --lora-targets all-linear|--pp 2 --dp 2 --ep 2"
  "pp2_dp2_ep2_last_stage_dense_no_distopt|4|--layers 4 --mlp-only-layers 2,3 --batch rows:8 --aux-coef 0.1 --aux-type per_layer|--pp 2 --dp 2 --ep 2 --use-distributed-optimizer false"
  "pp2_dp2_ep2_first_stage_dense_overlap|4|--layers 4 --mlp-only-layers 0,1 --batch rows:8 --aux-coef 0.1 --aux-type per_layer|--pp 2 --dp 2 --ep 2 --overlap-grad-reduce --overlap-param-gather"
  "pp2_lora_first_layer_only|2|--layers 2 --mlp-only-layers 0 --lora-r 4 --lora-targets layers.0.self_attn.q_proj --aux-coef 0.1 --aux-type per_layer|--pp 2"
  "dp2_ep2_lora_one_expert_only|2|--batch rows:8 --lora-r 4 --lora-targets experts.0.gate_proj|--dp 2 --ep 2")
twinkle_moe_layout_tests(moe_layout_ "--steps 3" ${TWINKLE_MOE_DENSE_STAGE_LAYOUTS})
