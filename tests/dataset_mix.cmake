# test_parquet (tests/unit/data) checks the reader against datasets when the build reads parquet, else
# that a parquet file is refused naming what to install.
if(TWINKLE_WITH_PARQUET)
  target_compile_definitions(test_parquet PRIVATE TWINKLE_TEST_PARQUET_ON=1)
endif()

# Several datasets through `twinkle train --dataset A B#6` (a jsonl and a pyarrow-written parquet
# dataset; twinkle/data/mixture.h): the #N count, an exact resume of the mixture's data position, and
# the same steps on dp 2 as on one process (tests/reference/check_dataset_mix.py). The mixed order
# itself: tests/unit/data/test_mixture.cpp.
add_test(NAME dataset_mix_counts_resume_dp2
         COMMAND ${CMAKE_SOURCE_DIR}/tests/check_run.sh "dataset mixture: counts, resume and dp2 OK"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_dataset_mix.py --build ${CMAKE_BINARY_DIR})
set_tests_properties(dataset_mix_counts_resume_dp2 PROPERTIES TIMEOUT 180)
