# Sharded training checkpoints (--save-format sharded, include/twinkle/io/sharded_checkpoint.h):
# each rank writes its own slices plus an index written last; resume on the same layout is bit-identical
# to the uninterrupted run (tests/reference/check_resume.py --save-format sharded, 10 steps vs 5 + save
# + 5) and on other layouts within check_resume's resharding tolerance (losses 1e-6 relative, grad norms
# 1e-5); the slices cover every tensor exactly once and equal a gathered save bit for bit, and `twinkle
# export --from-checkpoint` writes the gathered save's HF / PEFT files byte for byte
# (check_sharded_ckpt.py coverage); kill points in a 4-rank save leave the previous checkpoint
# (check_sharded_ckpt.py crash); corrupted sharded checkpoints are refused by name (bad).
function(twinkle_sharded_resume_test name np)
  add_test(NAME resume_sharded_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "resume check OK .*, sharded\\)"
                   ${TWINKLE_REF_RUN} ${CHECK_RESUME} --build ${CMAKE_BINARY_DIR} --save-format sharded ${ARGN})
  set_tests_properties(resume_sharded_${name} PROPERTIES TIMEOUT 400 PROCESSORS 2)
endfunction()
twinkle_sharded_resume_test(exact_single_dense 1)
# --bucket-size 1000: ZeRO-1 shards of 496 elements cut parameters inside rows, so the slices include
# partial-row boxes (with the default 4 MiB buckets every cut lies on a row boundary here)
twinkle_sharded_resume_test(exact_tp2_pp2_dp2_dense_reshard 8 --np 8 --layout "--tp 2 --pp 2 --dp 2 --bucket-size 1000"
                            --reshard "1:,4:--dp 4,4:--pp 4,4:--tp 2 --dp 2")
twinkle_sharded_resume_test(exact_tp2_pp2_dp2_lora_reshard 8 --np 8 --layout "--tp 2 --pp 2 --dp 2" --lora-r 4
                            --reshard "1:,4:--tp 2 --dp 2")
twinkle_sharded_resume_test(exact_tp2_pp2_dp2_ep2_moe_reshard 8 --model moe --np 8 --layout "--tp 2 --pp 2 --dp 2 --ep 2"
                            --reshard "1:,4:--dp 4 --ep 2,4:--tp 2 --dp 2 --ep 2")
# the MoE + CP layout of the recipes in bf16 (same layout: bit-identical)
twinkle_sharded_resume_test(exact_tp2_pp2_cp2_ep2_moe_bf16 8 --model moe --np 8 --layout "--tp 2 --pp 2 --cp 2 --ep 2 --bf16")
# expert LoRA pairs on their ep ranks, saved on dp4 ep2, resumed in one process and on tp2 dp2 ep2
twinkle_sharded_resume_test(exact_dp4_ep2_moe_lora_reshard 4 --model moe --lora-r 4 --np 4 --layout "--dp 4 --ep 2"
                            --reshard "1:,4:--tp 2 --dp 2 --ep 2")
# etp slices of every expert, resumed in one process and on dp4 etp2
twinkle_sharded_resume_test(exact_tp2_dp2_ep2_etp2_moe_reshard 4 --model moe --np 4 --layout "--tp 2 --dp 2 --ep 2 --etp 2"
                            --reshard "1:,4:--dp 4 --etp 2")
twinkle_sharded_resume_test(crash_kill_and_full_disk_tp2_dp2 4 --mode crash --np 4 --layout "--tp 2 --dp 2")
# --async-save: the slices copied at the save, written by a background thread (slowed: TWINKLE_FAULT_WRITE=delay) while steps 6..9 run,
# committed when every rank is done; bit-identical all the same, and a killed writer loses nothing
twinkle_sharded_resume_test(exact_tp2_pp2_dp2_dense_async 8 --np 8 --layout "--tp 2 --pp 2 --dp 2 --async-save"
                            --reshard "1:")

set(CHECK_SHARDED ${CMAKE_SOURCE_DIR}/tests/reference/check_sharded_ckpt.py)
function(twinkle_sharded_ckpt_test name np)
  add_test(NAME sharded_ckpt_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "sharded checkpoint check OK .*"
                   ${TWINKLE_REF_RUN} ${CHECK_SHARDED} --build ${CMAKE_BINARY_DIR} ${ARGN})
  set_tests_properties(sharded_ckpt_${name} PROPERTIES TIMEOUT 300)
  if(np GREATER 1)
    set_tests_properties(sharded_ckpt_${name} PROPERTIES PROCESSORS 2)
  endif()
endfunction()
twinkle_sharded_ckpt_test(coverage_tp2_pp2_dp2_dense 8 --np 8 --layout "--tp 2 --pp 2 --dp 2 --bucket-size 1000")
twinkle_sharded_ckpt_test(coverage_tp2_pp2_dp2_ep2_moe_lora 8 --model moe --lora-r 4 --np 8 --layout "--tp 2 --pp 2 --dp 2 --ep 2")
twinkle_sharded_ckpt_test(coverage_tp2_dp2_ep2_etp2_moe 4 --model moe --np 4 --layout "--tp 2 --dp 2 --ep 2 --etp 2 --bucket-size 1000")
twinkle_sharded_ckpt_test(crash_kill_points_tp2_dp2 4 --mode crash --np 4 --layout "--tp 2 --dp 2")
twinkle_sharded_ckpt_test(bad_checkpoints_tp2 2 --mode bad --np 2 --layout "--tp 2")
twinkle_sharded_ckpt_test(crash_kill_points_tp2_dp2_async 4 --mode crash --np 4 --layout "--tp 2 --dp 2 --async-save")
# On device "cuda" (the emulated device, label cuda_emu): the master weights and the ZeRO-1 moments come
# down from the device through the write buffer and go back up on resume
if(TWINKLE_WITH_CUDA_BACKEND)
  add_test(NAME resume_sharded_exact_dp2_dense_cuda_emu
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "resume check OK .*, sharded\\)"
                   ${TWINKLE_REF_RUN} ${CHECK_RESUME} --build ${CMAKE_BINARY_DIR} --save-format sharded
                   --twinkle ${CMAKE_BINARY_DIR}/tests/twinkle_cuda_emu --np 2 --layout "--dp 2 --device cuda")
  set_tests_properties(resume_sharded_exact_dp2_dense_cuda_emu PROPERTIES LABELS cuda_emu TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMP_NUM_THREADS=1")
endif()
