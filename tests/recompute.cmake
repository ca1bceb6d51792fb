# Activation recompute: "selective" and "full" are bit-identical to "none" (losses,
# grad norms, gradients, parameters over 3 steps) and save fewer activation bytes, on one process
# and on parallel layouts (tests/dist/recompute_check.cpp); with a LoRA adapter whose dropout masks
# the recomputed forwards must draw again (_lora), with the bf16 kernel set (_bf16), and with two model
# chunks per pipeline rank sharing the rank's recompute buffers (_vpp2; forward_only's loss = the first
# step's). (A MoE vpp2 rank of only MoE layers saves the same under full as under none: full recomputes
# dense layers only, so the bytes rule does not apply there; the MoE vpp layout test covers its numbers.)
add_executable(recompute_check ${CMAKE_SOURCE_DIR}/tests/dist/recompute_check.cpp)
set_target_properties(recompute_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(recompute_check PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(recompute_check PRIVATE twinkle_train)
set(TWINKLE_RECOMPUTE_LAYOUTS
  "np1|1|"
  "np1_moe|1|--moe"
  "tp2_pp2|4|--tp 2 --pp 2"
  "tp2_pp2_sp|4|--tp 2 --pp 2 --sp"
  "cp2|2|--cp 2"
  "np1_lora|1|--lora"
  "np1_moe_lora_bf16|1|--moe --lora --bf16"
  "tp2_pp2_sp_lora_bf16|4|--tp 2 --pp 2 --sp --lora --bf16"
  "cp2_lora|2|--cp 2 --lora"
  "pp2_vpp2|2|--pp 2 --vpp 2"
  "tp2_pp2_vpp2_sp_lora_bf16|4|--tp 2 --pp 2 --vpp 2 --sp --lora --bf16")
foreach(spec ${TWINKLE_RECOMPUTE_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(LENGTH parts n)
  set(flag_list "")
  if(n GREATER 2)
    list(GET parts 2 flags)
    separate_arguments(flag_list UNIX_COMMAND "${flags}")
  endif()
  add_test(NAME recompute_identical_${name}
           COMMAND ${TWINKLE_CHECK_RUN} "recompute_check OK: ${np} ranks.*"
                   ${TWINKLE_MPIRUN} -np ${np} ${CMAKE_BINARY_DIR}/tests/recompute_check ${flag_list})
  set_tests_properties(recompute_identical_${name} PROPERTIES TIMEOUT 120 PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
