# TensorBoard event files (twinkle train --tensorboard-dir; twinkle/io/tensorboard.h) read back by
# TensorBoard itself: EventAccumulator's scalars equal metrics.jsonl, the records' CRCs equal
# tensorboard's masked_crc32c and a flipped byte is refused by its reader, and a resumed run into the
# same directory shows one curve (tests/reference/check_tensorboard.py).
add_test(NAME tensorboard_events_read_by_tensorboard
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "tensorboard check OK: .*"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_tensorboard.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(tensorboard_events_read_by_tensorboard PROPERTIES TIMEOUT 120)
