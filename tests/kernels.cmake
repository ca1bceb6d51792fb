# Kernels vs PyTorch (the project environment .venv, scripts/setup) float64 autograd references.
# The fixture test runs tests/reference/kernels_ref.py ONCE into ${CMAKE_BINARY_DIR}/kernels_ref; every
# case of torch_ref_kernels (discovered GoogleTest cases) then only reads those files.
set(TWINKLE_KERNELS_REF_DIR ${CMAKE_BINARY_DIR}/kernels_ref)
add_executable(torch_ref_kernels ${CMAKE_SOURCE_DIR}/tests/unit/kernels/torch_ref_kernels.cpp)
set_target_properties(torch_ref_kernels PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(torch_ref_kernels PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(torch_ref_kernels PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)

add_test(NAME kernels_ref_data
         COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/kernels_ref.py --out ${TWINKLE_KERNELS_REF_DIR})
set_tests_properties(kernels_ref_data PROPERTIES FIXTURES_SETUP kernels_ref TIMEOUT 120)
gtest_discover_tests(torch_ref_kernels DISCOVERY_TIMEOUT 60
                     PROPERTIES FIXTURES_REQUIRED kernels_ref
                                ENVIRONMENT "KERNELS_REF_DIR=${TWINKLE_KERNELS_REF_DIR};TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# Kernel conformance table: every op x every registered implementation x forward/backward vs the same
# PyTorch float64 references (fixture above). Also built in the portable CI build (tests/portable.cmake).
add_executable(kernel_conformance ${CMAKE_SOURCE_DIR}/tests/unit/kernels/kernel_conformance.cpp)
set_target_properties(kernel_conformance PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(kernel_conformance PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
target_link_libraries(kernel_conformance PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)
gtest_discover_tests(kernel_conformance DISCOVERY_TIMEOUT 60
                     PROPERTIES FIXTURES_REQUIRED kernels_ref
                                ENVIRONMENT "KERNELS_REF_DIR=${TWINKLE_KERNELS_REF_DIR};TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
