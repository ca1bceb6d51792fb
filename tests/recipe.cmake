# The dense recipe end to end (make demo) and its device errors.
add_test(NAME recipe_8ranks_equals_single_and_loads_in_torch
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_recipe.py --build ${CMAKE_BINARY_DIR} --steps 4)
set_tests_properties(recipe_8ranks_equals_single_and_loads_in_torch PROPERTIES TIMEOUT 600 PROCESSORS 2)
add_test(NAME recipe_npu_fails_at_once
         COMMAND ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh 10 "no NPU backend.*CANN"
                 ${CMAKE_BINARY_DIR}/examples/tp_recipe --device npu --dp 1 --tp 1 --pp 1)
add_test(NAME recipe_ascend_visible_devices_fails_at_once
         COMMAND ${CMAKE_COMMAND} -E env ASCEND_RT_VISIBLE_DEVICES=0,1 TWINKLE_DEVICE=npu
                 ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh 10 "no NPU backend"
                 ${CMAKE_BINARY_DIR}/examples/tp_recipe --dp 1 --tp 1 --pp 1)
# (a CUDA build on a machine without a GPU fails as fast, naming the missing GPU)
add_test(NAME recipe_cuda_without_backend_fails_at_once
         COMMAND ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh 10 "no CUDA backend|device 'cuda': no GPU visible"
                 ${CMAKE_BINARY_DIR}/examples/tp_recipe --device cuda --dp 1 --tp 1 --pp 1)
add_test(NAME recipe_world_size_mismatch_fails
         COMMAND ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh 30 "world size 1 does not match the device mesh"
                 ${CMAKE_BINARY_DIR}/examples/tp_recipe)
add_test(NAME cli_train_heads_not_divisible_by_tp
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_bad_layouts.py --build ${CMAKE_BINARY_DIR})
add_test(NAME train_rank_killed_mid_step_ends_job COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_kill_rank.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_rank_killed_mid_step_ends_job PROPERTIES TIMEOUT 180 PROCESSORS 2)
# tp_recipe --lora (add_adapter_to_model r 8 / alpha 32 / all-linear): 8 ranks = 1 rank every step; the
# saved PEFT adapter on the base gives twinkle's held-out loss in the PyTorch reference (lora_ref.py).
add_test(NAME recipe_lora_8ranks_equals_single_and_loads_in_torch
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_recipe.py --build ${CMAKE_BINARY_DIR} --steps 3 --lora)
set_tests_properties(recipe_lora_8ranks_equals_single_and_loads_in_torch PROPERTIES TIMEOUT 600 PROCESSORS 2)

# The Qwen3-MoE recipe (examples/moe_recipe.cpp): dp2 tp2 pp2 ep2 on 8 ranks == one
# process per step (loss, grad norm and its expert part, aux loss, expert load), and its
# checkpoint (experts gathered from their ep ranks) loads in the PyTorch Qwen3-MoE reference.
add_test(NAME moe_recipe_8ranks_equals_single_and_loads_in_torch
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_recipe.py --build ${CMAKE_BINARY_DIR}
                 --steps 3 --recipe moe_recipe)
set_tests_properties(moe_recipe_8ranks_equals_single_and_loads_in_torch PROPERTIES TIMEOUT 600 PROCESSORS 2)
# Recipe 3 (examples/moe_cp_recipe.cpp): tp2 pp2 cp2 ep2 with ring attention, the same checks.
add_test(NAME moe_cp_recipe_8ranks_equals_single_and_loads_in_torch
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_recipe.py --build ${CMAKE_BINARY_DIR}
                 --steps 2 --recipe moe_cp_recipe)
set_tests_properties(moe_cp_recipe_8ranks_equals_single_and_loads_in_torch PROPERTIES TIMEOUT 600 PROCESSORS 2)
# --resume into the recipe's own output directory (examples/recipe_metrics.h): metrics.jsonl keeps
# the earlier steps and the summary counts the steps this run trained (tp_recipe and moe_recipe).
add_test(NAME recipe_resume_keeps_metrics_and_summary
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_recipe_resume.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(recipe_resume_keeps_metrics_and_summary PROPERTIES TIMEOUT 300)
