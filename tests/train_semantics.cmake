# Training semantics users trip on and option / row validation:
#  - non-finite loss / grad norm never reaches the weights, on one process and parallel layouts;
#  - every layout trains the same rows at every step across an epoch boundary, short last batch
#    included, vs the PyTorch loss of those rows, also when a micro-batch, a dp rank or the
#    whole step has no labelled token;
#  - every option bound, --max-steps, --help defaults, --skip-bad-rows, steps without labels.
if(NOT TARGET twinkle_cli)  # never drop these tests silently
  message(FATAL_ERROR "train_semantics.cmake needs the twinkle CLI target (tools/twinkle)")
endif()
add_test(NAME train_nonfinite_stops_or_skips
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_nonfinite.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_nonfinite_stops_or_skips PROPERTIES TIMEOUT 400 PROCESSORS 2)
add_test(NAME train_epoch_tail_same_rows_every_layout
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_epoch_tail.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_epoch_tail_same_rows_every_layout PROPERTIES TIMEOUT 400 PROCESSORS 2)
add_test(NAME train_options_validated
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_train_options.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_options_validated PROPERTIES TIMEOUT 300)
# An MPI test program of tests/dist linked against the whole library, built into build/tests.
function(twinkle_train_mpi_program name)
  add_executable(${name} ${CMAKE_SOURCE_DIR}/tests/dist/${name}.cpp)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${name} PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
  target_link_libraries(${name} PRIVATE twinkle)
endfunction()
# A save that fails on rank 0 (unwritable directory, non-finite weight) raises on every rank
# instead of leaving the others in a collective (a hang would hit the TIMEOUT).
twinkle_train_mpi_program(mpi_save_failure)
add_test(NAME train_save_failure_reaches_every_rank
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "save failure OK on 2 ranks"
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                 -np 2 ${CMAKE_BINARY_DIR}/tests/mpi_save_failure ${CMAKE_SOURCE_DIR}/models/qwen3-tiny
                 ${CMAKE_BINARY_DIR}/tests)
set_tests_properties(train_save_failure_reaches_every_rank PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
                     FAIL_REGULAR_EXPRESSION "CHECK FAILED")
# Loading that fails on one pipeline stage only (a checkpoint / adapter without the last layer's
# tensors) is refused on both ranks, in the constructor, load() and load_adapter(); a refused
# load() changes no rank's parameters (tests/dist/mpi_load_failure.cpp).
twinkle_train_mpi_program(mpi_load_failure)
add_test(NAME train_load_failure_reaches_every_rank
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "load failure OK on 2 ranks"
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                 -np 2 ${CMAKE_BINARY_DIR}/tests/mpi_load_failure ${CMAKE_SOURCE_DIR}/models/qwen3-tiny
                 ${CMAKE_BINARY_DIR}/tests)
set_tests_properties(train_load_failure_reaches_every_rank PROPERTIES TIMEOUT 120 PROCESSORS 2
                     ENVIRONMENT "OMP_NUM_THREADS=1" FAIL_REGULAR_EXPRESSION "CHECK FAILED")
# MFU uses the global mean sequence length on every rank, also on a dp rank without a row this
# step (a short last batch); before, that rank kept the previous step's local mean.
twinkle_train_mpi_program(mpi_mfu_empty_rank)
add_test(NAME train_mfu_global_mean_length_on_empty_rank
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "mfu OK: 3 steps, global mean length on every rank"
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                 -np 2 ${CMAKE_BINARY_DIR}/tests/mpi_mfu_empty_rank ${CMAKE_SOURCE_DIR}/models/qwen3-tiny)
set_tests_properties(train_mfu_global_mean_length_on_empty_rank PROPERTIES TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;TWINKLE_PEAK_GFLOPS=1" FAIL_REGULAR_EXPRESSION "CHECK FAILED")
# Refusals inside forward_backward / forward_only reach every rank alike (dist/agreed_error.h):
# a bad token id, label or uncollatable rows given to one data-parallel replica only, and a second
# forward_backward before the step under overlap_grad_reduce; every rank raises the same
# twinkle::Error and the job then trains on. Before, the refusing ranks threw while their peers
# waited in a collective: the run hung until the timeout (tests/dist/mpi_refusal_agreed.cpp).
twinkle_train_mpi_program(mpi_refusal_agreed)
foreach(spec "dp2|2|qwen3-tiny|--dp 2" "pp2_dp2|4|qwen3-tiny|--pp 2 --dp 2"
             "moe_dp2_ep2|2|qwen3-moe-tiny|--dp 2 --ep 2" "cp2_dp2|4|qwen3-tiny|--cp 2 --dp 2"
             "tp2_dp2|4|qwen3-tiny|--tp 2 --dp 2")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 model)
  list(GET parts 3 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME train_refusal_agreed_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "refusal_agreed OK: ${np} ranks.*"
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                   -np ${np} ${CMAKE_BINARY_DIR}/tests/mpi_refusal_agreed ${CMAKE_SOURCE_DIR}/models/${model} ${flag_list})
  set_tests_properties(train_refusal_agreed_${name} PROPERTIES TIMEOUT 120 PROCESSORS 2
                       ENVIRONMENT "OMP_NUM_THREADS=1" FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()
