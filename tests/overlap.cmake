# Overlapped dp communication: overlap_grad_reduce and overlap_param_gather
# give bit-identical losses, grad norms, reduced gradients and parameters to the synchronous path
# over 3 steps, and really overlap (buckets started in the backward, all-gathers waited for in the
# forward) — tests/dist/overlap_check.cpp. dp4 reduces over 4 ranks (summation order matters);
# short_batch leaves one replica without a micro-batch (its buckets start in finalize_grads, in
# the same order as its peer's); the MoE layouts reduce the expert buckets over expert-dp
# (ep2·dp2: expert-dp 1; dp4·ep2 and dp4·etp2: expert-dp 2). On every layout a second
# forward_backward before the step under overlap_grad_reduce must be refused on every rank with the
# error naming the option, and the job then go on (under pp the last stage alone used to throw,
# mid-backward, leaving stage 0 waiting for its gradient: that layout hung until the timeout);
# pp2 has no dp bucket at all, pp2_dp2_short a replica without a micro-batch under pp.
add_executable(overlap_check ${CMAKE_SOURCE_DIR}/tests/dist/overlap_check.cpp)
set_target_properties(overlap_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(overlap_check PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(overlap_check PRIVATE twinkle_train)
set(TWINKLE_OVERLAP_LAYOUTS
  "dp2|2|--dp 2"
  "dp2_allreduce|2|--dp 2 --no-distopt"
  "dp4|4|--dp 4"
  "dp2_short_batch|2|--dp 2 --short"
  "tp2_dp2_sp|4|--tp 2 --dp 2 --sp"
  "pp2_dp2|4|--pp 2 --dp 2"
  "pp2|2|--pp 2"
  "pp2_dp2_short|4|--pp 2 --dp 2 --short"
  "moe_ep2_dp2|2|--moe --dp 2 --ep 2"
  "moe_dp4_ep2|4|--moe --dp 4 --ep 2"
  "moe_dp4_etp2|4|--moe --dp 4 --etp 2")
foreach(spec ${TWINKLE_OVERLAP_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME overlap_identical_${name}
           COMMAND ${TWINKLE_CHECK_RUN} "overlap_check OK: ${np} ranks.*"
                   ${TWINKLE_MPIRUN} -np ${np} ${CMAKE_BINARY_DIR}/tests/overlap_check ${flag_list})
  set_tests_properties(overlap_identical_${name} PROPERTIES TIMEOUT 120 PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# The same on device "cuda" (dense layouts; the model, its gradients and parameters on the device, the
# buckets through the CUDA groups' non-blocking collectives, src/dist/cuda, ordered on the backend's stream):
# on the emulated device in every run (label cuda_emu: tests/cuda.cmake twinkle_emu_program; host-staged,
# the emulation has no NCCL) and on a lent GPU (label gpu; the ranks share it, so host-staged there too).
if(TWINKLE_WITH_CUDA_BACKEND)
  twinkle_emu_program(overlap_check_cuda_emu ${CMAKE_SOURCE_DIR}/tests/dist/overlap_check.cpp)
  foreach(spec "dp2|2|--dp 2" "dp2_allreduce|2|--dp 2 --no-distopt" "tp2_dp2_sp|4|--tp 2 --dp 2 --sp")
    string(REPLACE "|" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 flags)
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
    add_test(NAME overlap_identical_cuda_${name}_emu
             COMMAND ${TWINKLE_CHECK_RUN} "overlap_check OK: ${np} ranks on cuda.*"
                     ${TWINKLE_MPIRUN} -np ${np} -x ASAN_OPTIONS=detect_leaks=0
                     ${CMAKE_BINARY_DIR}/tests/overlap_check_cuda_emu ${flag_list} --device cuda)
    set_tests_properties(overlap_identical_cuda_${name}_emu PROPERTIES LABELS cuda_emu TIMEOUT 300 PROCESSORS 2
                         ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
    add_test(NAME overlap_identical_cuda_${name}
             COMMAND ${TWINKLE_GPU_OR_SKIP} ${TWINKLE_CHECK_RUN} "overlap_check OK: ${np} ranks on cuda.*"
                     ${TWINKLE_MPIRUN} -np ${np} ${CMAKE_BINARY_DIR}/tests/overlap_check ${flag_list} --device cuda)
    set_tests_properties(overlap_identical_cuda_${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "OMP_NUM_THREADS=1;TWINKLE_CUDA_COMM=staged")
  endforeach()
endif()
