# Training semantics users trip on (issue 8) and option / row validation (issue 17):
#  - non-finite loss / grad norm never reaches the weights, on one process and parallel layouts (B26);
#  - every layout trains the same rows at every step across an epoch boundary, short last batch
#    included, vs the PyTorch loss of those rows (B27, B24);
#  - every option bound, --max-steps, --help defaults, --skip-bad-rows, steps without labels.
if(NOT TARGET twinkle_cli)
  return()
endif()
add_test(NAME train_nonfinite_stops_or_skips
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/check_nonfinite.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_nonfinite_stops_or_skips PROPERTIES TIMEOUT 400 PROCESSORS 2)
add_test(NAME train_epoch_tail_same_rows_every_layout
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/check_epoch_tail.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_epoch_tail_same_rows_every_layout PROPERTIES TIMEOUT 400 PROCESSORS 2)
add_test(NAME train_options_validated
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/check_train_options.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(train_options_validated PROPERTIES TIMEOUT 300)
