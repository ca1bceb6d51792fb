# Run by the CTest test kernel_conformance_portable (tests/portable.cmake) as `cmake -P`:
# configures a second build directory with TWINKLE_PORTABLE=ON (no -march=native: the x86-64-v2
# baseline, so the generic, non-AVX-512 code paths of the kernels are compiled), builds ONLY the
# kernels library and the conformance test there, and runs the conformance table against the same
# PyTorch reference data. Variables: SRC, BIN, REF_DIR, LAUNCHER (optional compiler launcher).
set(launcher_arg "")
if(LAUNCHER)
  set(launcher_arg "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G Ninja -DCMAKE_BUILD_TYPE=Release -DTWINKLE_PORTABLE=ON
                        -DTWINKLE_ASAN=OFF -DTWINKLE_CUDA=OFF ${launcher_arg}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable configure failed:\n${out}\n${err}")
endif()
string(REGEX MATCH "twinkle: arch flags '[^']*'" arch "${out}")
message(STATUS "${arch}")
if(arch MATCHES "native")
  message(FATAL_ERROR "portable build still uses -march=native: ${arch}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target kernel_conformance -j 2 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "portable build of kernel_conformance failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env KERNELS_REF_DIR=${REF_DIR} TWINKLE_SOURCE_DIR=${SRC}
                        ${BIN}/tests/kernel_conformance --gtest_brief=1 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kernel conformance failed on the portable build")
endif()
