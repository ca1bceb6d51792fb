# Meta-test: every CTest entry passes only when its check passes (no pass regexes, WILL_FAIL or
# DISABLED entries; injected check failures fail their entries). See tests/meta/check_ctest_entries.py.
add_test(NAME ctest_entries_fail_when_checks_fail
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/meta/check_ctest_entries.py ${CMAKE_BINARY_DIR})
set_tests_properties(ctest_entries_fail_when_checks_fail PROPERTIES TIMEOUT 300)

# Every tests/mutations/*.patch applies to the tree (git apply --check): a rotted mutation fails
# here instead of when someone next repeats it. Skipped (77) outside a git checkout.
add_test(NAME mutation_patches_apply
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/meta/check_mutation_patches.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(mutation_patches_apply PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
# The pre-forked Python the reference checks run in (tests/reference/prefork.py, tests/CMakeLists.txt)
# runs a script exactly as `python SCRIPT` does, and really forks.
add_test(NAME reference_prefork_equals_cold
         COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/check_prefork.py --build ${CMAKE_BINARY_DIR})
