# tests/cp.cmake — context parallelism: ring (p2p) and Ulysses (a2a) attention on cp = 1, 2, 4
# ranks against the cp = 1 flash-attention kernel, with the analytic bytes per rank
# (tests/dist/mpi_cp_attention.cpp). The input split has GoogleTest unit tests
# (tests/unit/parallel/test_cp_split.cpp).
add_executable(mpi_cp_attention ${CMAKE_SOURCE_DIR}/tests/dist/mpi_cp_attention.cpp)
set_target_properties(mpi_cp_attention PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(mpi_cp_attention PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(mpi_cp_attention PRIVATE twinkle_parallel)
foreach(np 1 2 4)
  add_test(NAME cp_attention_np${np}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "mpi_cp_attention OK on ${np} ranks"
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   --mca mpi_yield_when_idle 1 -np ${np} ${CMAKE_BINARY_DIR}/tests/mpi_cp_attention)
  # check_run.sh: exit code 0 AND the anchored OK line (a pass regex would ignore the exit code)
  set_tests_properties(cp_attention_np${np} PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
                       FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()
# Two OpenMP threads: the block kernel's backward takes its two-pass schedule for 2 kv heads
# (the one-pass schedule for 4), both checked against the cp = 1 kernel.
add_test(NAME cp_attention_np2_threads2
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "mpi_cp_attention OK on 2 ranks"
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                 --mca mpi_yield_when_idle 1 -np 2 ${CMAKE_BINARY_DIR}/tests/mpi_cp_attention)
set_tests_properties(cp_attention_np2_threads2 PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=2"
                     FAIL_REGULAR_EXPRESSION "CHECK FAILED")
