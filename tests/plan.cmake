# `twinkle plan`: the planned per-rank peak within 15 % of the measured peak RSS of the
# bench configs (train_bench a, b; b with full recompute; a and b-full also with --bf16, whose
# planned saving over fp32 on a must match the measured one within 30 %), of a 4-rank pp2 dp2
# layout (and the same with vpp 2: chunk activations as the interleaved schedule holds them) and of a
# 4-rank Qwen3-MoE dp4 etp2 layout (experts split over etp, ZeRO over
# edp 2), and on both layouts every rank's parameter and AdamW-state elements exactly
# (tests/reference/check_plan.py); train_bench w (wide attention on 2048-token rows, fp32 and bf16) where
# the attention kernels' packed operands are ~25 % of the peak; a layout above --memory-per-rank fails naming its biggest item.
# One test per case group (check_plan.py --only), so CTest spreads them over the cores: a, b and w
# run one single-threaded process each, the two layouts 4 ranks.
foreach(spec "a|3|1" "b|3|1" "w|2|1" "layout|8|2" "moe|8|2" "layout_vpp|8|2" "async|7|2")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 only)
  list(GET parts 1 ncases)
  list(GET parts 2 procs)
  add_test(NAME plan_vs_measured_rss_${only}
           COMMAND ${TWINKLE_CHECK_RUN} "check_plan: ${ncases} cases pass"
                   ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_plan.py --build ${CMAKE_BINARY_DIR}
                   --mpirun ${MPIEXEC_EXECUTABLE} --only ${only})
  set_tests_properties(plan_vs_measured_rss_${only} PROPERTIES TIMEOUT 600 PROCESSORS ${procs})
endforeach()
add_test(NAME plan_memory_per_rank_exceeded
         COMMAND ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh 30
                 "does not fit --memory-per-rank 0.01 GiB: stage 0 needs [0-9.]+ GiB; its biggest item is optimizer state"
                 ${CMAKE_BINARY_DIR}/bin/twinkle plan --model ${CMAKE_SOURCE_DIR}/models/qwen3-tiny --micro-batch-size 1
                 --seq-length 64 --memory-per-rank 0.01)
set_tests_properties(plan_memory_per_rank_exceeded PROPERTIES TIMEOUT 60)
# a row length training pads under cp (to 2·cp, 2·cp·tp with SP) is planned padded, not refused
add_test(NAME plan_cp_pads_rows_as_training
         COMMAND ${TWINKLE_CHECK_RUN} "plan cp padding check OK: [0-9]+ cases"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_plan_cp_padding.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(plan_cp_pads_rows_as_training PROPERTIES TIMEOUT 120 PROCESSORS 2)
