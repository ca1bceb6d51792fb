# The portable build: -march=native makes each machine test one vector path only, so CI also runs the
# kernel conformance table (tests/unit/kernels/kernel_conformance.cpp) on a TWINKLE_PORTABLE=ON build
# (x86-64-v2 baseline) in ${CMAKE_BINARY_DIR}/portable, building only twinkle_kernels and that test.
if(NOT TWINKLE_PORTABLE)
  add_test(NAME kernel_conformance_portable
           COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DBIN=${CMAKE_BINARY_DIR}/portable
                   -DREF_DIR=${TWINKLE_KERNELS_REF_DIR} -DLAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
                   -P ${CMAKE_SOURCE_DIR}/tests/portable/conformance.cmake)
  set_tests_properties(kernel_conformance_portable PROPERTIES FIXTURES_REQUIRED kernels_ref TIMEOUT 900 PROCESSORS 2)
endif()
