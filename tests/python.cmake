# The Python package (python/): built only when pybind11-dev / python3-dev are there.
# Pass / fail on exit codes (unittest and the check script exit non-zero on any failure).
if(TARGET twinkle_python)
  set(TWINKLE_PY_ENV "PYTHONPATH=${CMAKE_BINARY_DIR}/python;TWINKLE_SOURCE_DIR=${CMAKE_SOURCE_DIR};OMP_NUM_THREADS=1")
  add_test(NAME python_bindings
           COMMAND ${Python_EXECUTABLE} -m unittest discover -s ${CMAKE_SOURCE_DIR}/tests/python -p "test_*.py" -v)
  set_tests_properties(python_bindings PROPERTIES ENVIRONMENT "${TWINKLE_PY_ENV}" TIMEOUT 300)
  # The three cookbook recipes vs their C++ twins (loss / grad norm / lr 1e-6 per step, checkpoint bytes), each
  # on a different setting so no 8-rank run is added: tp.py with MegatronModel's default mixed_precision
  # (Twinkle's 'bf16') vs tp_recipe --bf16; tp_moe.py with the cookbook's adapter line on (TWINKLE_LORA=1,
  # expert LoRA) in bf16 vs moe_recipe --bf16 --lora; tp_moe_cp.py with mixed_precision='no' vs
  # moe_cp_recipe --fp32 (the fp32 comparison).
  add_test(NAME python_tp_recipe_equals_cpp_recipe
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --rows 32 --precision bf16)
  set_tests_properties(python_tp_recipe_equals_cpp_recipe PROPERTIES TIMEOUT 600 PROCESSORS 2)
  add_test(NAME python_tp_moe_lora_equals_cpp_moe_recipe_lora
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --recipe moe --rows 16 --steps 3 --precision bf16 --lora)
  set_tests_properties(python_tp_moe_lora_equals_cpp_moe_recipe_lora PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # the cookbook's MoE + CP recipe (tp_moe_cp_npu.py): examples/python/tp_moe_cp.py (tp2 pp2 cp2 ep2) vs examples/moe_cp_recipe
  add_test(NAME python_tp_moe_cp_fp32_equals_cpp_moe_cp_recipe
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --recipe moe_cp --rows 16 --steps 3 --precision fp32)
  set_tests_properties(python_tp_moe_cp_fp32_equals_cpp_moe_cp_recipe PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # load(..., load_optimizer=True): a saved and resumed Python run equals the uninterrupted one
  add_test(NAME python_resume_equals_uninterrupted
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_resume.py
                   --build ${CMAKE_BINARY_DIR})
  set_tests_properties(python_resume_equals_uninterrupted PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # save(..., async_save=True) on dp2 x tp2: the save returns with the write in flight, steps 5-6 run while
  # the (slowed: TWINKLE_FAULT_WRITE=delay) writer threads write, wait_for_save() commits; a new launch that
  # loads the checkpoint equals the uninterrupted run bit for bit, and so do the overlapped steps
  add_test(NAME python_resume_async_equals_uninterrupted
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_resume.py
                   --build ${CMAKE_BINARY_DIR} --mesh 2,2,1 --async-save)
  set_tests_properties(python_resume_async_equals_uninterrupted PROPERTIES TIMEOUT 300 PROCESSORS 2)
  # add_adapter_to_model (PEFT's LoraConfig) equals `twinkle train --lora-*` on tp2 x dp2
  add_test(NAME python_lora_equals_cli_lora
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "check_python_lora: 0 mismatches"
                   ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_lora.py
                   --build ${CMAKE_BINARY_DIR} --rows 24)
  set_tests_properties(python_lora_equals_cli_lora PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # an uncaught exception on one rank of a Python job ends the job (sys.excepthook -> MPI_Abort)
  # instead of hanging in MPI_Finalize while the other rank waits in a collective
  add_test(NAME python_rank_exception_ends_job
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "python rank exception check OK: .*"
                   ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_rank_exception.py
                   --build ${CMAKE_BINARY_DIR})
  set_tests_properties(python_rank_exception_ends_job PROPERTIES TIMEOUT 150 PROCESSORS 2)
  # the CMake install component pip / scikit-build-core installs (pyproject.toml)
  add_test(NAME python_install_component
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "python install component OK: [0-9]+ modules and the extension"
                   ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_install.py
                   --build ${CMAKE_BINARY_DIR} --cmake ${CMAKE_COMMAND})
  set_tests_properties(python_install_component PROPERTIES TIMEOUT 120)
  # `pip install .` into a fresh venv (scikit-build-core from the package index) and the cookbook's recipe from
  # that install == from the build tree (tests/reference/check_pip_install.py)
  add_test(NAME python_pip_install_runs_recipe
           COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "pip install check OK: .*"
                   ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_pip_install.py --build ${CMAKE_BINARY_DIR})
  set_tests_properties(python_pip_install_runs_recipe PROPERTIES TIMEOUT 900 PROCESSORS 2)
endif()

# examples/python/tp.py with device_type 'cuda' on the emulated device (the extension built over the
# CUDA emulation: tests/cuda.cmake twinkle_python_cuda_emu) against the C++ recipe on it
# (tests/tp_recipe_cuda_emu), both --bf16 (Twinkle's default mixed precision) on tp2, 2 steps of 4 rows:
# losses, grad norms and the checkpoint bytes equal. Host emulation, not a GPU run.
if(TARGET twinkle_python_cuda_emu)
  add_test(NAME python_tp_recipe_cuda_equals_cpp_recipe_cuda_emu
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --rows 8 --batch-size 4 --precision bf16 --device cuda
                   --recipe-bin ${CMAKE_BINARY_DIR}/tests/tp_recipe_cuda_emu
                   --python-dir ${CMAKE_BINARY_DIR}/python_cuda_emu --np 2 --layout "--dp 1 --tp 2 --pp 1")
  set_tests_properties(python_tp_recipe_cuda_equals_cpp_recipe_cuda_emu PROPERTIES LABELS cuda_emu TIMEOUT 300
                       PROCESSORS 2 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMP_NUM_THREADS=1")
  # the two MoE recipes the same way on their eight ranks (label extended too: make test-extended):
  # tp_moe.py with the cookbook's LoRA line in bf16 vs moe_recipe --bf16 --lora, tp_moe_cp.py (ring attention on
  # the device) in fp32 vs moe_cp_recipe --fp32; measured identical losses, grad norms and checkpoint bytes
  add_test(NAME python_tp_moe_cuda_lora_bf16_equals_cpp_moe_recipe_cuda_emu
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --recipe moe --rows 8 --batch-size 2 --steps 2 --precision bf16 --lora
                   --device cuda --recipe-bin ${CMAKE_BINARY_DIR}/tests/moe_recipe_cuda_emu
                   --python-dir ${CMAKE_BINARY_DIR}/python_cuda_emu)
  add_test(NAME python_tp_moe_cp_cuda_fp32_equals_cpp_moe_cp_recipe_cuda_emu
           COMMAND ${Python_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/reference/check_python_recipe.py
                   --build ${CMAKE_BINARY_DIR} --recipe moe_cp --rows 8 --batch-size 2 --steps 2 --precision fp32
                   --device cuda --recipe-bin ${CMAKE_BINARY_DIR}/tests/moe_cp_recipe_cuda_emu
                   --python-dir ${CMAKE_BINARY_DIR}/python_cuda_emu)
  set_tests_properties(python_tp_moe_cuda_lora_bf16_equals_cpp_moe_recipe_cuda_emu
                       python_tp_moe_cp_cuda_fp32_equals_cpp_moe_cp_recipe_cuda_emu PROPERTIES
                       LABELS "cuda_emu;extended" TIMEOUT 600 PROCESSORS 2
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;OMP_NUM_THREADS=1")
endif()
