# Collective volume: every rank's counted bytes per step equal the analytic volume of the layout
# (bench/layout_bench.cpp --check-volume), so there is no hidden extra traffic.
set(TWINKLE_VOLUME_LAYOUTS
  "tp2|2|--tp 2"
  "tp2_sp|2|--tp 2 --sp"
  "pp4|4|--pp 4"
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
           COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                   ${CMAKE_BINARY_DIR}/bin/twinkle-run --nproc_per_node=${np}
                   ${CMAKE_BINARY_DIR}/bench/layout_bench ${flag_list} --rows 8 --steps 1 --check-volume)
  set_tests_properties(comm_volume_${name} PROPERTIES TIMEOUT 120 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "all ranks match the analytic volume")
endforeach()
