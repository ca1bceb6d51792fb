# tests/moe.cmake — Qwen3-MoE pieces: the MoE CPU kernels vs PyTorch float64 (references from
# tests/reference/moe_kernels_ref.py, semantics of tests/reference/qwen3_moe_ref.py), the
# reference model's own selftest, and the expert-parallel alltoall dispatcher on 2 and 4 ranks.
set(TWINKLE_MOE_REF_DIR ${CMAKE_BINARY_DIR}/moe_kernels_ref)
add_executable(torch_ref_moe ${CMAKE_SOURCE_DIR}/tests/unit/kernels/torch_ref_moe.cpp)
set_target_properties(torch_ref_moe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(torch_ref_moe PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(torch_ref_moe PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)

add_test(NAME moe_kernels_ref_data
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/moe_kernels_ref.py --out ${TWINKLE_MOE_REF_DIR})
set_tests_properties(moe_kernels_ref_data PROPERTIES FIXTURES_SETUP moe_kernels_ref TIMEOUT 120)
gtest_discover_tests(torch_ref_moe DISCOVERY_TIMEOUT 60
                     PROPERTIES FIXTURES_REQUIRED moe_kernels_ref
                                ENVIRONMENT "MOE_KERNELS_REF_DIR=${TWINKLE_MOE_REF_DIR};TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# The reference Qwen3-MoE against independent formulations (dense expert sum, padding removal,
# balanced-load values).
add_test(NAME moe_reference_selftest
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "qwen3_moe_ref selftest: all ok"
                 /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/qwen3_moe_ref.py selftest)
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
# process (values, router-logit and router-weight gradients, padding excluded) — B09.
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
