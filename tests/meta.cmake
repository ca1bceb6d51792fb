# Meta-test: every CTest entry passes only when its check passes (no pass regexes, WILL_FAIL or
# DISABLED entries; injected check failures fail their entries). See tests/meta/check_ctest_entries.py.
add_test(NAME ctest_entries_fail_when_checks_fail
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/meta/check_ctest_entries.py ${CMAKE_BINARY_DIR})
set_tests_properties(ctest_entries_fail_when_checks_fail PROPERTIES TIMEOUT 300)
