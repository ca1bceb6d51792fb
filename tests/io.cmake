# io layer: cross-check against an independent Python safetensors implementation, and the
# safetensors / checkpoint / config tests rebuilt under AddressSanitizer + UBSan.

# C++ side of tests/reference/io_safetensors_ref.py (dump / write files on request).
add_executable(io_xcheck_tool ${CMAKE_SOURCE_DIR}/tests/unit/io/io_xcheck_tool.cpp)
set_target_properties(io_xcheck_tool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(io_xcheck_tool PRIVATE ${TWINKLE_WARN})
target_link_libraries(io_xcheck_tool PRIVATE twinkle_io)

# The reference needs the project environment's python (.venv) with numpy and torch (scripts/setup installs them).
# Without it configuration FAILS unless the cross-check is switched off explicitly
# (-DTWINKLE_IO_PYTHON_XCHECK=OFF; CI never does): it is never dropped silently.
option(TWINKLE_IO_PYTHON_XCHECK "Register io_safetensors_python_xcheck (needs ${TWINKLE_REF_PYTHON} with numpy, torch)" ON)
set(TWINKLE_IO_REFERENCE_PYTHON ${TWINKLE_REF_PYTHON} CACHE FILEPATH "the project environment's python (.venv, scripts/setup) with numpy and torch")
if(TWINKLE_IO_PYTHON_XCHECK)
  if(NOT EXISTS ${TWINKLE_IO_REFERENCE_PYTHON})
    message(FATAL_ERROR "twinkle: ${TWINKLE_IO_REFERENCE_PYTHON} not found, so io_safetensors_python_xcheck (and the other "
                        "PyTorch reference tests) cannot run. Run scripts/setup (the project "
                        "environment .venv) or configure with -DTWINKLE_IO_PYTHON_XCHECK=OFF.")
  endif()
  add_test(NAME io_safetensors_python_xcheck
           COMMAND ${TWINKLE_IO_REFERENCE_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/io_safetensors_ref.py
                   $<TARGET_FILE:io_xcheck_tool> ${CMAKE_BINARY_DIR}/tests/io_xcheck_work)
  set_tests_properties(io_safetensors_python_xcheck PROPERTIES TIMEOUT 120 LABELS "io;reference")
endif()

# Hostile-input tests under ASan+UBSan: the io and core sources are compiled again with the
# sanitizers (not linked against the normal libraries) so every parser access is checked.
if(TWINKLE_ASAN)
  file(GLOB TWINKLE_IO_ASAN_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/io/*.cpp ${CMAKE_SOURCE_DIR}/src/core/*.cpp)
  add_executable(test_safetensors_asan ${TWINKLE_IO_ASAN_SRCS}
                 ${CMAKE_SOURCE_DIR}/tests/unit/io/test_safetensors.cpp
                 ${CMAKE_SOURCE_DIR}/tests/unit/io/test_model_config.cpp)
  set_target_properties(test_safetensors_asan PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(test_safetensors_asan PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_compile_definitions(test_safetensors_asan PRIVATE TWINKLE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  set(TWINKLE_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_compile_options(test_safetensors_asan PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS} -O1 -g ${TWINKLE_SAN_FLAGS})
  target_link_options(test_safetensors_asan PRIVATE ${TWINKLE_SAN_FLAGS})
  target_link_libraries(test_safetensors_asan PRIVATE nlohmann_json::nlohmann_json Threads::Threads
                        GTest::gtest GTest::gtest_main)
  add_test(NAME test_safetensors_asan COMMAND test_safetensors_asan)
  set_tests_properties(test_safetensors_asan PROPERTIES TIMEOUT 300 LABELS "io;asan"
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endif()
