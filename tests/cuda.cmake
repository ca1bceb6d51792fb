# The CUDA backend (a -DTWINKLE_CUDA build). Host-side tests (tests/cuda/test_cuda_runtime.cpp) run
# everywhere; tests labelled `gpu` need a GPU: without one they print the reason and exit 77, which CTest
# reports as skipped (SKIP_RETURN_CODE), never as passed. On the lent GPU: ctest -L gpu --output-on-failure.
if(TWINKLE_WITH_CUDA_BACKEND)
  add_executable(test_cuda_runtime ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_runtime.cpp)
  set_target_properties(test_cuda_runtime PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(test_cuda_runtime PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
  target_link_libraries(test_cuda_runtime PRIVATE twinkle_kernels GTest::gtest GTest::gtest_main)
  gtest_discover_tests(test_cuda_runtime DISCOVERY_TIMEOUT 60)
endif()

# gpu-labelled tests: one CTest test per binary (no discovery: the binary decides skip vs run).
function(twinkle_gpu_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
endfunction()

if(TWINKLE_WITH_CUDA_BACKEND)
  # The op conformance table (tests/unit/kernels/kernel_conformance.cpp) for every "cuda" implementation,
  # inputs staged to the device, against the same PyTorch float64 references (fixture kernels_ref).
  add_executable(kernel_conformance_cuda ${CMAKE_SOURCE_DIR}/tests/unit/kernels/kernel_conformance.cpp)
  set_target_properties(kernel_conformance_cuda PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(kernel_conformance_cuda PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
  target_compile_definitions(kernel_conformance_cuda PRIVATE TWINKLE_CONFORMANCE_CUDA)
  target_include_directories(kernel_conformance_cuda PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda)
  target_link_libraries(kernel_conformance_cuda PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)
  twinkle_gpu_test(cuda_kernel_conformance ${CMAKE_BINARY_DIR}/tests/kernel_conformance_cuda)
  set_tests_properties(cuda_kernel_conformance PROPERTIES FIXTURES_REQUIRED kernels_ref
                       ENVIRONMENT "KERNELS_REF_DIR=${CMAKE_BINARY_DIR}/kernels_ref;TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

  # The runtime on a real device: allocator reuse, tensors on the GPU, fp32 GEMM without TF32, errors.
  add_executable(test_cuda_device ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_device.cpp)
  set_target_properties(test_cuda_device PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(test_cuda_device PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
  target_link_libraries(test_cuda_device PRIVATE twinkle_kernels GTest::gtest)
  twinkle_gpu_test(cuda_device ${CMAKE_BINARY_DIR}/tests/test_cuda_device)
endif()

# The HOST EMULATION of CUDA (tests/cuda/emu/cuda_shim.h: a block's threads are fibers on one OS thread
# meeting at barriers, device memory a separate address range that launches, copies and cuBLAS check
# pointers against, cuBLAS = a reference loop). test_cuda_shim checks the emulation itself (needs no CUDA
# toolchain); the conformance table below runs the CUDA backend's own sources on it under AddressSanitizer:
# the kernels' index arithmetic, masks, synchronization structure, host logic and pointer spaces are checked
# on every run, GPU or not (not a substitute for the gpu-labelled run).
add_executable(test_cuda_shim ${CMAKE_SOURCE_DIR}/tests/cuda/emu/test_cuda_shim.cpp
               ${CMAKE_SOURCE_DIR}/tests/cuda/emu/cuda_shim.cpp)
set_target_properties(test_cuda_shim PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_include_directories(test_cuda_shim PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda/emu ${CMAKE_SOURCE_DIR}/include)
target_compile_options(test_cuda_shim PRIVATE ${TWINKLE_WARN} -O1 -fsanitize=address -fno-omit-frame-pointer)
target_link_options(test_cuda_shim PRIVATE -fsanitize=address)
target_link_libraries(test_cuda_shim PRIVATE GTest::gtest GTest::gtest_main)
gtest_discover_tests(test_cuda_shim DISCOVERY_TIMEOUT 60 PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")

if(TWINKLE_WITH_CUDA_BACKEND)
  file(GLOB _twinkle_cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu
       ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cpp)
  set(_twinkle_emu_srcs "")
  foreach(src ${_twinkle_cuda_srcs})
    get_filename_component(_n ${src} NAME)
    set(_w ${CMAKE_BINARY_DIR}/cuda_emu/${_n}.cpp)
    file(CONFIGURE OUTPUT ${_w} CONTENT "#include \"${src}\"\n")
    list(APPEND _twinkle_emu_srcs ${_w})
  endforeach()
  add_executable(kernel_conformance_cuda_emu ${CMAKE_SOURCE_DIR}/tests/unit/kernels/kernel_conformance.cpp
                 ${_twinkle_emu_srcs} ${CMAKE_SOURCE_DIR}/tests/cuda/emu/cuda_shim.cpp)
  set_target_properties(kernel_conformance_cuda_emu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(kernel_conformance_cuda_emu PRIVATE TWINKLE_CONFORMANCE_CUDA TWINKLE_CUDA_SHIM)
  target_include_directories(kernel_conformance_cuda_emu PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda
                             ${CMAKE_SOURCE_DIR}/tests/cuda/emu ${CMAKE_SOURCE_DIR}/src/kernels/cuda)
  target_compile_options(kernel_conformance_cuda_emu PRIVATE ${TWINKLE_WARN} -Wno-unknown-pragmas -O1 -fsanitize=address
                         -fno-omit-frame-pointer)
  target_link_options(kernel_conformance_cuda_emu PRIVATE -fsanitize=address)
  target_link_libraries(kernel_conformance_cuda_emu PRIVATE twinkle_kernels nlohmann_json::nlohmann_json GTest::gtest)
  add_test(NAME cuda_kernel_conformance_emu COMMAND kernel_conformance_cuda_emu --gtest_brief=1)
  set_tests_properties(cuda_kernel_conformance_emu PROPERTIES FIXTURES_REQUIRED kernels_ref TIMEOUT 600
                       ENVIRONMENT "KERNELS_REF_DIR=${CMAKE_BINARY_DIR}/kernels_ref;TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR};ASAN_OPTIONS=detect_leaks=0")

  # The CUDA process groups (src/dist/cuda) on the emulated device: tests/cuda/test_cuda_groups.cpp (the
  # gpu-labelled cuda_groups_* of tests/cuda_model.cmake) built with the backend's runtime, allocator and
  # kernels and the groups' own sources on the shim, under ASan (no NCCL in the emulation: host-staged).
  # The emulated objects come before the libraries, so the linker takes them, not the real ones.
  file(GLOB _twinkle_dist_cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/dist/cuda/*.cpp)
  set(_twinkle_emu_dist_srcs "")
  foreach(src ${_twinkle_dist_cuda_srcs})
    get_filename_component(_n ${src} NAME)
    set(_w ${CMAKE_BINARY_DIR}/cuda_emu/dist_${_n}.cpp)
    file(CONFIGURE OUTPUT ${_w} CONTENT "#include \"${src}\"\n")
    list(APPEND _twinkle_emu_dist_srcs ${_w})
  endforeach()
  # A program on the emulated device: its sources + the emulated backend and groups + the shim, under ASan.
  function(twinkle_emu_program name)
    add_executable(${name} ${ARGN} ${_twinkle_emu_srcs} ${_twinkle_emu_dist_srcs}
                   ${CMAKE_SOURCE_DIR}/tests/cuda/emu/cuda_shim.cpp)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    target_compile_definitions(${name} PRIVATE TWINKLE_CUDA_SHIM TWINKLE_WITH_CUDA)
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda ${CMAKE_SOURCE_DIR}/tests/cuda/emu
                               ${CMAKE_SOURCE_DIR}/src/kernels/cuda)
    target_compile_options(${name} PRIVATE ${TWINKLE_WARN} -Wno-unknown-pragmas -O1 -fsanitize=address
                           -fno-omit-frame-pointer)
    target_link_options(${name} PRIVATE -fsanitize=address)
    target_link_libraries(${name} PRIVATE twinkle_train MPI::MPI_CXX GTest::gtest)
  endfunction()
  twinkle_emu_program(test_cuda_groups_emu ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_groups.cpp)
  # The dense model on the emulated device vs the CPU backend (cuda_model_vs_cpu's twin).
  twinkle_emu_program(test_cuda_model_emu ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_model.cpp)
  # `twinkle` itself on the emulated device (tools/twinkle): train_cuda_vs_torch and layout_cuda_*'s twins
  # (tests/cuda_model.cmake) run it through tests/reference/check_train.py --twinkle.
  file(GLOB _twinkle_tool_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/twinkle/*.cpp)
  twinkle_emu_program(twinkle_cuda_emu ${_twinkle_tool_srcs})
  target_compile_definitions(twinkle_cuda_emu PRIVATE TWINKLE_CUDA_BUILT TWINKLE_CUDA_ARCHS="emulated")
  # the cookbook's dense recipe (examples/tp_recipe.cpp) on the emulated device
  twinkle_emu_program(tp_recipe_cuda_emu ${CMAKE_SOURCE_DIR}/examples/tp_recipe.cpp)
  target_compile_definitions(tp_recipe_cuda_emu PRIVATE TWINKLE_CUDA_BUILT)
  # the cookbook's MoE recipe (examples/moe_recipe.cpp: tp2 pp2 dp2 ep2) on the emulated device
  twinkle_emu_program(moe_recipe_cuda_emu ${CMAKE_SOURCE_DIR}/examples/moe_recipe.cpp)
  target_compile_definitions(moe_recipe_cuda_emu PRIVATE TWINKLE_CUDA_BUILT)
  # and the third (examples/moe_cp_recipe.cpp: tp2 pp2 cp2 ep2)
  twinkle_emu_program(moe_cp_recipe_cuda_emu ${CMAKE_SOURCE_DIR}/examples/moe_cp_recipe.cpp)
  target_compile_definitions(moe_cp_recipe_cuda_emu PRIVATE TWINKLE_CUDA_BUILT)
  # The Python package on the emulated device: the extension (python/src) linked with the emulated backend
  # and groups (without ASan: a Python process would need libasan preloaded; the shim's pointer checks and
  # PROT_NONE device memory still apply) in build/python_cuda_emu/twinkle, next to a copy of the package.
  if(TARGET twinkle_python)
    file(GLOB _twinkle_py_bindings CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/src/*.cpp)
    pybind11_add_module(twinkle_pyext_cuda_emu MODULE NO_EXTRAS ${_twinkle_py_bindings} ${_twinkle_emu_srcs}
                        ${_twinkle_emu_dist_srcs} ${CMAKE_SOURCE_DIR}/tests/cuda/emu/cuda_shim.cpp)
    set_target_properties(twinkle_pyext_cuda_emu PROPERTIES OUTPUT_NAME _core
                          LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python_cuda_emu/twinkle)
    target_compile_definitions(twinkle_pyext_cuda_emu PRIVATE TWINKLE_CUDA_SHIM TWINKLE_WITH_CUDA)
    target_include_directories(twinkle_pyext_cuda_emu PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda
                               ${CMAKE_SOURCE_DIR}/tests/cuda/emu ${CMAKE_SOURCE_DIR}/src/kernels/cuda)
    target_compile_options(twinkle_pyext_cuda_emu PRIVATE ${TWINKLE_WARN} -Wno-unknown-pragmas -O2)
    target_link_libraries(twinkle_pyext_cuda_emu PRIVATE twinkle MPI::MPI_CXX)
    file(GLOB_RECURSE _twinkle_py_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/twinkle/*.py)
    set(_twinkle_py_emu_stamp ${CMAKE_BINARY_DIR}/python_cuda_emu/twinkle.stamp)
    add_custom_command(OUTPUT ${_twinkle_py_emu_stamp}
                       COMMAND ${CMAKE_COMMAND} -E copy_directory ${CMAKE_SOURCE_DIR}/python/twinkle
                               ${CMAKE_BINARY_DIR}/python_cuda_emu/twinkle
                       COMMAND ${CMAKE_COMMAND} -E touch ${_twinkle_py_emu_stamp}
                       DEPENDS ${_twinkle_py_files}
                       COMMENT "twinkle: copying the Python package to build/python_cuda_emu")
    add_custom_target(twinkle_python_cuda_emu ALL DEPENDS ${_twinkle_py_emu_stamp} twinkle_pyext_cuda_emu)
  endif()
  # bench/train_bench on the emulated device (the GPU step bench of scripts/device-check, its plumbing here:
  # a tiny config, one bf16 step on device cuda, the JSON with the device's fields)
  twinkle_emu_program(train_bench_cuda_emu ${CMAKE_SOURCE_DIR}/bench/train_bench.cpp)
  target_compile_definitions(train_bench_cuda_emu PRIVATE TWINKLE_CUDA_BUILT)
  # bench/layout_bench on the emulated device (--device cuda): the communication volume of the device path counted
  # at the MPI layer (tests/volume.cmake, comm_volume_cuda_*_emu): the CUDA groups stage through the host MPI groups
  twinkle_emu_program(layout_bench_cuda_emu ${CMAKE_SOURCE_DIR}/bench/layout_bench.cpp)
  add_test(NAME train_bench_cuda_step_emu
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "\\{\"engine\": \"twinkle\", \"config\": \"s\".*\"device\": \"cuda\", \"device_name\": \"twinkle CUDA emulator.*\"peak_device_bytes\": [1-9][0-9]*.*"
                   $<TARGET_FILE:train_bench_cuda_emu> --config s --device cuda --bf16 --batch 1 --seq 32 --steps 1
                   --warmup 0)
  set_tests_properties(train_bench_cuda_step_emu PROPERTIES LABELS cuda_emu TIMEOUT 300
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  add_test(NAME cuda_model_vs_cpu_emu COMMAND test_cuda_model_emu --gtest_brief=1)
  set_tests_properties(cuda_model_vs_cpu_emu PROPERTIES LABELS cuda_emu TIMEOUT 600
                       ENVIRONMENT "TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR};ASAN_OPTIONS=detect_leaks=0")
  add_test(NAME cuda_groups_single_emu COMMAND test_cuda_groups_emu)
  add_test(NAME cuda_groups_staged_np2_emu
           COMMAND ${MPIEXEC_EXECUTABLE} -np 2 --oversubscribe --allow-run-as-root --bind-to none
                   -x ASAN_OPTIONS=detect_leaks=0 -x TWINKLE_CUDA_COMM=staged $<TARGET_FILE:test_cuda_groups_emu>)
  set_tests_properties(cuda_groups_single_emu cuda_groups_staged_np2_emu PROPERTIES LABELS cuda_emu TIMEOUT 300
                       ENVIRONMENT "TWINKLE_CUDA_COMM=staged;ASAN_OPTIONS=detect_leaks=0")
endif()
