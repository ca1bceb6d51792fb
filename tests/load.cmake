# Checkpoint loading at step 0: twinkle eval vs PyTorch on sharded F32 / BF16 checkpoints with
# non-trivial norm weights and biases (tied and untied, attention_bias on). A loader that skips
# or swaps norm weights or biases fails it (tests/README.md, mutation log).
if(NOT TARGET twinkle_cli)  # never drop these tests silently
  message(FATAL_ERROR "load.cmake needs the twinkle CLI target (tools/twinkle)")
endif()
add_test(NAME load_sharded_nontrivial_norms_vs_torch
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_load.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(load_sharded_nontrivial_norms_vs_torch PROPERTIES TIMEOUT 300)
