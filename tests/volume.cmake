# Collective volume counted at the MPI layer: bench/layout_bench runs one step under mpirun with
# the PMPI interposition library tests/dist/mpi_count.cpp preloaded, and every rank's bytes per
# (communicator, MPI call) must equal the volume Megatron's formulas give for the layout
# (tests/reference/check_comm_volume.py; the formulas are derived in bench/README.md).
add_library(twinkle_mpi_count SHARED ${CMAKE_SOURCE_DIR}/tests/dist/mpi_count.cpp)
set_target_properties(twinkle_mpi_count PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(twinkle_mpi_count PRIVATE ${TWINKLE_WARN})
target_link_libraries(twinkle_mpi_count PRIVATE MPI::MPI_CXX)

set(TWINKLE_VOLUME_LAYOUTS
  "tp2|2|--tp 2"
  "tp2_sp|2|--tp 2 --sp"
  "pp4|4|--pp 4"
  "tp2_pp2_even|4|--tp 2 --pp 2 --split even"
  "tp2_pp2_balanced|4|--tp 2 --pp 2"
  "dp2_distopt|2|--dp 2"
  "dp2_allreduce|2|--dp 2 --no-distopt"
  "tp2_pp2_dp2_sp|8|--tp 2 --pp 2 --dp 2 --sp"
  "pp2_vpp2|2|--pp 2 --vpp 2"
  "tp2_pp2_vpp2_sp|4|--tp 2 --pp 2 --vpp 2 --sp --split even"
  # context parallelism: the ring (TransformerEngine's AttnFuncWithCPAndKVP2P) and Ulysses (a2a) on the cp
  # group, rows padded to 2·cp (2·cp·tp under SP), the dense gradients and the loss over dp-cp
  "cp2_ring|2|--cp 2"
  "cp2_a2a|2|--cp 2 --cp-comm-type a2a"
  "tp2_cp2_sp|4|--tp 2 --cp 2 --sp"
  "cp2_dp2|4|--cp 2 --dp 2")
foreach(spec ${TWINKLE_VOLUME_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME comm_volume_${name}
           COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_comm_volume.py
                   --build ${CMAKE_BINARY_DIR} --mpirun ${MPIEXEC_EXECUTABLE} --np ${np} ${flag_list})
  set_tests_properties(comm_volume_${name} PROPERTIES TIMEOUT 240 PROCESSORS 2)
endforeach()

# Qwen3-MoE: bench/layout_bench --check-volume with --config moe: every rank's bytes
# per process group equal the analytic volume, the ep group's all-to-all bytes computed from the
# top-k routing that happened (each micro-batch's routing read from the model's activations, the
# other ranks' rows exchanged after the step), the expert region reduced over expert-dp and the
# dense one over dp-cp; tp2 x dp2 x ep2 (ep = the tp groups, edp = the dp groups) and pp2 x dp2 x
# ep2 (ep = the dp groups, one micro-batch per pipeline slot); with expert tensor parallelism
# tp2 x dp2 x ep2 x etp2 (etp = the tp groups, ep = the dp groups): the etp group's traffic per
# MoE layer and micro-batch is the counts all-gather plus four padded row collectives (all-gather
# of the expert input and of d(output), reduce-scatter of the partial outputs and of d(input)),
# the padding the most rows any etp rank received over ep (bench/layout_bench.cpp's header).
# With context parallelism (cp2 x ep2: ep = the cp group) the cp group carries the ring's (or Ulysses')
# bytes per attention layer and micro-batch and the router statistics summed over the cp shards
# ((2E+2) fp64 per MoE layer and micro-batch).
foreach(spec "tp2_dp2_ep2|4|--tp 2 --dp 2 --ep 2 --rows 4 --mbs 2" "pp2_dp2_ep2|4|--pp 2 --dp 2 --ep 2 --rows 8 --mbs 4"
             "tp2_dp2_ep2_etp2|4|--tp 2 --dp 2 --ep 2 --etp 2 --rows 4 --mbs 2"
             "cp2_ep2|2|--cp 2 --ep 2 --rows 4 --mbs 4" "cp2_a2a_ep2|2|--cp 2 --ep 2 --cp-comm-type a2a --rows 4 --mbs 4")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME comm_volume_moe_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "volume check: all ranks match the analytic volume"
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                   -np ${np} ${CMAKE_BINARY_DIR}/bench/layout_bench --config moe ${flag_list} --steps 1
                   --check-volume --no-baseline)
  set_tests_properties(comm_volume_moe_${name} PROPERTIES TIMEOUT 120 PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# The counting library itself: every call kind (non-blocking collectives, point-to-point variants,
# persistent requests, a one-sided Put flagged as uncounted) against bytes written by hand.
add_executable(mpi_count_selftest ${CMAKE_SOURCE_DIR}/tests/dist/mpi_count_selftest.cpp)
set_target_properties(mpi_count_selftest PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(mpi_count_selftest PRIVATE ${TWINKLE_WARN})
target_link_libraries(mpi_count_selftest PRIVATE MPI::MPI_CXX)
add_dependencies(mpi_count_selftest twinkle_mpi_count)
add_test(NAME comm_volume_counter_counts_every_call_kind
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "check_mpi_count: [0-9]+ call kinds on 2 ranks, 0 mismatches"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/dist/check_mpi_count.py --build ${CMAKE_BINARY_DIR}
                 --mpirun ${MPIEXEC_EXECUTABLE})
set_tests_properties(comm_volume_counter_counts_every_call_kind PROPERTIES TIMEOUT 120)

# The device path: bench/layout_bench built on the host emulation of CUDA (tests/cuda.cmake,
# layout_bench_cuda_emu) with --device cuda. Its CUDA process groups (src/dist/cuda) stage every device buffer
# through the host MPI group, so the MPI layer must see exactly the bytes of the formulas above: a staging
# round trip that reached MPI twice, or a collective done on the host beside the staged one, fails. The MoE
# layouts run check (b) on the device (the CUDA groups count bytes_sent like the MPI groups:
# src/dist/cuda/cuda_group_base.cpp); routing is read from the device. The 8-rank layout is labelled extended (tests/CMakeLists.txt).
if(TWINKLE_WITH_CUDA_BACKEND)
  set(_emu_volume_tests "")
  foreach(spec "cp2_ring|2|--cp 2" "tp2_cp2_sp|4|--tp 2 --cp 2 --sp" "tp2_pp2_dp2|8|--tp 2 --pp 2 --dp 2")
    string(REPLACE "|" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 flags)
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
    add_test(NAME comm_volume_cuda_${name}_emu
             COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_comm_volume.py
                     --build ${CMAKE_BINARY_DIR} --mpirun ${MPIEXEC_EXECUTABLE} --np ${np} ${flag_list}
                     --bench $<TARGET_FILE:layout_bench_cuda_emu> --device cuda)
    list(APPEND _emu_volume_tests comm_volume_cuda_${name}_emu)
  endforeach()
  foreach(spec "tp2_dp2_ep2|4|--tp 2 --dp 2 --ep 2 --rows 4 --mbs 2" "pp2_dp2_ep2|4|--pp 2 --dp 2 --ep 2 --rows 8 --mbs 4"
               "tp2_dp2_ep2_etp2|4|--tp 2 --dp 2 --ep 2 --etp 2 --rows 4 --mbs 2" "cp2_ep2|2|--cp 2 --ep 2 --rows 4 --mbs 4")
    string(REPLACE "|" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 flags)
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
    add_test(NAME comm_volume_moe_cuda_${name}_emu
             COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "volume check: all ranks match the analytic volume"
                     ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1
                     -x ASAN_OPTIONS=detect_leaks=0 -np ${np} $<TARGET_FILE:layout_bench_cuda_emu> --config moe
                     ${flag_list} --steps 1 --check-volume --no-baseline --device cuda)
    list(APPEND _emu_volume_tests comm_volume_moe_cuda_${name}_emu)
  endforeach()
  set_tests_properties(${_emu_volume_tests} PROPERTIES LABELS cuda_emu TIMEOUT 240 PROCESSORS 2
                       ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
endif()
