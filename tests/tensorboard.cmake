# TensorBoard event files (twinkle train --tensorboard-dir; twinkle/io/tensorboard.h) read back by
# TensorBoard itself: EventAccumulator's scalars equal metrics.jsonl, the records' CRCs equal
# tensorboard's masked_crc32c and a flipped byte is refused by its reader, and a resumed run into the
# same directory shows one curve (tests/reference/check_tensorboard.py).
add_test(NAME tensorboard_events_read_by_tensorboard
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "tensorboard check OK: .*"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_tensorboard.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(tensorboard_events_read_by_tensorboard PROPERTIES TIMEOUT 120)

# A real `tensorboard --logdir` serves a run of `twinkle train --tensorboard-dir` and a headless Chromium
# (Debian's chromium driven by playwright-core; scripts/setup installs both) opens its Scalars page: the
# 'lm loss' card, the series the page fetched (steps 1..4) and its drawn chart; the screenshot is
# tests/tensorboard_browser/tensorboard_scalars.png in the build tree (tests/reference/check_tensorboard_browser.py,
# tests/reference/tensorboard_browser.mjs). Skipped (exit 77) only without chromium or playwright-core.
set(TWINKLE_TB_BROWSER_DIR ${CMAKE_BINARY_DIR}/tests/tensorboard_browser)
file(MAKE_DIRECTORY ${TWINKLE_TB_BROWSER_DIR})
add_test(NAME tensorboard_scalars_page_in_chromium
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_tensorboard_browser.py
                 --build ${CMAKE_BINARY_DIR} --out ${TWINKLE_TB_BROWSER_DIR}
         WORKING_DIRECTORY ${TWINKLE_TB_BROWSER_DIR})
set_tests_properties(tensorboard_scalars_page_in_chromium PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

# The peak memory on a device: twinkle built against the emulated CUDA device (tests/cuda.cmake) writes the
# caching allocator's peak of device bytes as 'mem-max-allocated-bytes' (DeviceAllocator::peak_bytes_in_use),
# not the process's resident set (check_tensorboard.py --device-twinkle).
if(TARGET twinkle_cuda_emu)
  add_test(NAME tensorboard_cuda_peak_memory_emu
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "tensorboard check OK: .*"
                   ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_tensorboard.py --build ${CMAKE_BINARY_DIR}
                   --device-twinkle ${CMAKE_BINARY_DIR}/tests/twinkle_cuda_emu)
  set_tests_properties(tensorboard_cuda_peak_memory_emu PROPERTIES LABELS cuda_emu TIMEOUT 120
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endif()

# Evaluation during training (twinkle train --val-dataset / --split-dataset-ratio --eval-interval --eval-iters,
# twinkle/train/evaluate.h): the eval loss vs transformers float64 on the saved checkpoints (one process and
# tp2 x pp2 x dp2), training and checkpoints bit-identical with and without eval, the TensorBoard tags 'lm loss
# validation' / 'lm loss validation ppl' read back by EventAccumulator and through a resume, the split vs
# datasets' train_test_split, twinkle plot (tests/reference/check_eval.py).
add_test(NAME train_eval_loss_vs_transformers
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "eval check OK: .*"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_eval.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_eval_loss_vs_transformers PROPERTIES TIMEOUT 240)
