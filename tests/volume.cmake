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
  "tp2_pp2_dp2_sp|8|--tp 2 --pp 2 --dp 2 --sp")
foreach(spec ${TWINKLE_VOLUME_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME comm_volume_${name}
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/check_comm_volume.py
                   --build ${CMAKE_BINARY_DIR} --mpirun ${MPIEXEC_EXECUTABLE} --np ${np} ${flag_list})
  set_tests_properties(comm_volume_${name} PROPERTIES TIMEOUT 240 PROCESSORS 2)
endforeach()
