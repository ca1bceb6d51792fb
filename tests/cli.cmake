# The `twinkle` front end as a new user meets it (tests/reference/check_cli.py): --help on stdout,
# usage errors on stderr with exit 2, `twinkle info --help` measures and writes nothing, and
# malformed --data-slice text refused naming the option before anything is loaded.
if(NOT TARGET twinkle_cli)  # never drop these tests silently
  message(FATAL_ERROR "cli.cmake needs the twinkle CLI target (tools/twinkle)")
endif()
add_test(NAME cli_help_usage_and_option_text
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_cli.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(cli_help_usage_and_option_text PROPERTIES TIMEOUT 300)
