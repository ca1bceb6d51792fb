# Checkpoints that resume (tests/reference/check_resume.py): 10 steps uninterrupted vs
# 5 + save (--save-optimizer) + a new process resuming for 5: losses, grad norms, lrs and the
# final fp32 weights / AdamW state bit-identical; the 8-rank checkpoint resumed on other layouts
# within 1e-6 relative; a rank killed mid-write and a full filesystem lose nothing; bad
# checkpoints fail naming the file and tensor. These run the gathered form (--save-format gathered,
# check_resume.py's default), the format before the sharded one; the sharded form: tests/sharded_ckpt.cmake.
set(CHECK_RESUME ${CMAKE_SOURCE_DIR}/tests/reference/check_resume.py)
function(twinkle_resume_test name np)
  add_test(NAME resume_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "resume check OK .*"
                   ${TWINKLE_REF_RUN} ${CHECK_RESUME} --build ${CMAKE_BINARY_DIR} ${ARGN})
  if(np GREATER 1)
    set_tests_properties(resume_${name} PROPERTIES TIMEOUT 400 PROCESSORS 2)
  else()
    set_tests_properties(resume_${name} PROPERTIES TIMEOUT 300)
  endif()
endfunction()
twinkle_resume_test(exact_single_dense 1)
twinkle_resume_test(exact_single_lora 1 --lora-r 4)
twinkle_resume_test(exact_single_moe 1 --model moe)
twinkle_resume_test(exact_tp2_pp2_dp2_dense_reshard 8 --np 8 --layout "--tp 2 --pp 2 --dp 2"
                    --reshard "1:,4:--dp 4,4:--tp 2 --dp 2")
twinkle_resume_test(exact_tp2_pp2_dp2_lora_reshard 8 --np 8 --layout "--tp 2 --pp 2 --dp 2" --lora-r 4
                    --reshard "1:,4:--dp 4,4:--tp 2 --dp 2")
twinkle_resume_test(exact_tp2_pp2_dp2_ep2_moe_reshard 8 --model moe --np 8 --layout "--tp 2 --pp 2 --dp 2 --ep 2"
                    --reshard "1:,4:--dp 4,4:--dp 4 --ep 2,4:--tp 2 --dp 2 --ep 2")
# expert tensor parallelism: the etp slices of every expert (and their AdamW state) saved from
# tp2 dp2 ep2 etp2 and resumed in one process, on dp4 etp2 (edp 2) and on dp2 etp2 (ep 1)
twinkle_resume_test(exact_tp2_dp2_ep2_etp2_moe_reshard 4 --model moe --np 4 --layout "--tp 2 --dp 2 --ep 2 --etp 2"
                    --reshard "1:,4:--dp 4 --etp 2,2:--dp 2 --etp 2")
twinkle_resume_test(crash_kill_and_full_disk_pp2 2 --mode crash --np 2 --layout "--pp 2")
twinkle_resume_test(bad_checkpoints 1 --mode bad)
# LoRA on Qwen3-MoE (expert pairs held by their ep ranks in the adapter store's expert region, the
# router pair replicated): saved on dp4 ep2 and resumed in one process, on dp2 ep2 and on tp2 dp2 ep2
twinkle_resume_test(exact_dp4_ep2_moe_lora_reshard 4 --model moe --lora-r 4 --np 4 --layout "--dp 4 --ep 2"
                    --reshard "1:,2:--dp 2 --ep 2,4:--tp 2 --dp 2 --ep 2")
# A pipeline stage without experts (layers 0-1 dense): saved with the optimizer on pp2 dp2 ep2
# (stage 0 writes no expert tensor) and resumed on pp2 dp2 and in one process
twinkle_resume_test(exact_pp2_dp2_ep2_first_stage_dense_moe_reshard 4 --model moe --mlp-only-layers 0,1 --np 4
                    --layout "--pp 2 --dp 2 --ep 2" --reshard "1:,4:--pp 2 --dp 2")
# LoRA on expert 0 only (ep rank 1's adapter store holds nothing): saved on dp2 ep2, resumed in one process
twinkle_resume_test(exact_dp2_ep2_moe_lora_one_expert_reshard 2 --model moe --lora-r 4 --lora-targets experts.0.gate_proj
                    --np 2 --layout "--dp 2 --ep 2" --reshard "1:")
# --metrics-file on --resume keeps the lines of the steps up to the checkpoint (it was truncated,
# losing the first half of the curve) and drops later ones and a cut-off line
add_test(NAME resume_keeps_metrics_file_lines
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "metrics resume check OK: .*"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_metrics_resume.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(resume_keeps_metrics_file_lines PROPERTIES TIMEOUT 120)
# On device "cuda": dp2 ranks sharing the device (ZeRO-1 AdamW state downloaded to be gathered and saved,
# uploaded on resume), exact as on the CPU: on the emulated device in every run (tests/twinkle_cuda_emu,
# label cuda_emu) and on a lent GPU (label gpu)
if(TWINKLE_WITH_CUDA_BACKEND)
  add_test(NAME resume_exact_dp2_dense_cuda_emu
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "resume check OK .*"
                   ${TWINKLE_REF_RUN} ${CHECK_RESUME} --build ${CMAKE_BINARY_DIR}
                   --twinkle ${CMAKE_BINARY_DIR}/tests/twinkle_cuda_emu --np 2 --layout "--dp 2 --device cuda")
  set_tests_properties(resume_exact_dp2_dense_cuda_emu PROPERTIES LABELS cuda_emu TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMP_NUM_THREADS=1")
  add_test(NAME resume_exact_dp2_dense_cuda
           COMMAND ${TWINKLE_GPU_OR_SKIP} ${CMAKE_SOURCE_DIR}/tests/check_run.sh "resume check OK .*"
                   ${TWINKLE_REF_RUN} ${CHECK_RESUME} --build ${CMAKE_BINARY_DIR} --np 2 --layout "--dp 2 --device cuda")
  set_tests_properties(resume_exact_dp2_dense_cuda PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endif()
