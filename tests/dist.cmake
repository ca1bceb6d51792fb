# tests/dist.cmake — multi-rank tests of the distributed runtime (MPI programs in
# tests/dist/*.cpp, run with mpirun or build/bin/twinkle-run), the numpy reference of the
# mesh layout, and the failure-handling checks (a failing rank must end the job < 30 s).
set(TWINKLE_DIST_TEST_DIR ${CMAKE_BINARY_DIR}/tests)
foreach(prog mpi_collectives mpi_groups mpi_fail mesh_dump)
  add_executable(${prog} ${CMAKE_SOURCE_DIR}/tests/dist/${prog}.cpp)
  set_target_properties(${prog} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${TWINKLE_DIST_TEST_DIR})
  target_compile_options(${prog} PRIVATE ${TWINKLE_WARN} ${TWINKLE_ARCH_FLAGS})
  target_link_libraries(${prog} PRIVATE twinkle_dist)
endforeach()

set(TWINKLE_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
    --mca mpi_yield_when_idle 1)
set(TWINKLE_RUN ${CMAKE_BINARY_DIR}/bin/twinkle-run)
set(TWINKLE_EXPECT_FAIL ${CMAKE_SOURCE_DIR}/tests/dist/expect_fail.sh)
# Pass = exit code 0 AND an anchored output line (tests/check_run.sh); never PASS_REGULAR_EXPRESSION,
# which makes CTest ignore the exit code (tests/meta/check_ctest_entries.py enforces this).
set(TWINKLE_CHECK_RUN ${CMAKE_SOURCE_DIR}/tests/check_run.sh)
set(TWINKLE_DIST_ENV "OMP_NUM_THREADS=1;LOG_LEVEL=INFO")

# Every collective, on the world group and the tp / dp sub-groups of a tp=2 mesh.
foreach(np 2 4 8)
  add_test(NAME dist_collectives_np${np}
           COMMAND ${TWINKLE_CHECK_RUN} "mpi_collectives OK on ${np} ranks"
                   ${TWINKLE_MPIRUN} -np ${np} ${TWINKLE_DIST_TEST_DIR}/mpi_collectives)
  set_tests_properties(dist_collectives_np${np} PROPERTIES TIMEOUT 90 ENVIRONMENT "${TWINKLE_DIST_ENV}"
                       FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()

# Communicators of the recipe meshes match DeviceMesh (8 ranks).
set(TWINKLE_DIST_MESHES "dp=2,tp=2,pp=2" "dp=2,tp=2,pp=2,ep=2" "tp=2,pp=2,cp=2,ep=2" "dp=4,tp=2,ep=2,etp=2")
foreach(spec ${TWINKLE_DIST_MESHES})
  string(REPLACE "," "_" tname "${spec}")
  string(REPLACE "=" "" tname "${tname}")
  add_test(NAME dist_groups_${tname} COMMAND ${TWINKLE_CHECK_RUN} "mpi_groups OK .*"
                   ${TWINKLE_MPIRUN} -np 8 ${TWINKLE_DIST_TEST_DIR}/mpi_groups ${spec})
  set_tests_properties(dist_groups_${tname} PROPERTIES TIMEOUT 90 ENVIRONMENT "${TWINKLE_DIST_ENV}"
                       FAIL_REGULAR_EXPRESSION "CHECK FAILED")
endforeach()
# The same through the launcher (its mpirun options and environment).
# Both lines must appear, in any order: ranks' stdout and stderr interleave, so one regex
# "A.*B" would fail whenever the OK line is flushed before the placement table.
add_test(NAME dist_groups_via_twinkle_run
         COMMAND bash -c "out=$(\"$0\" --nproc_per_node 8 \"$1\" dp=2,tp=2,pp=2 2>&1); rc=$?; printf '%s\\n' \"$out\"; [ $rc -eq 0 ] && grep -q 'DEVICE PLACEMENT TOPOLOGY' <<< \"$out\" && grep -q 'mpi_groups OK pp=2 x dp=2 x tp=2' <<< \"$out\""
                 ${TWINKLE_RUN} ${TWINKLE_DIST_TEST_DIR}/mpi_groups)
set_tests_properties(dist_groups_via_twinkle_run PROPERTIES TIMEOUT 90 ENVIRONMENT "LOG_LEVEL=INFO"
                     FAIL_REGULAR_EXPRESSION "CHECK FAILED")

# DeviceMesh against an independent numpy formulation of Megatron's layout.
add_test(NAME dist_mesh_numpy_reference
         COMMAND ${TWINKLE_CHECK_RUN} "check_mesh_numpy: [0-9]+ meshes, 0 mismatches"
                 ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/dist/check_mesh_numpy.py ${TWINKLE_DIST_TEST_DIR}/mesh_dump)
set_tests_properties(dist_mesh_numpy_reference PROPERTIES TIMEOUT 60)

# initialize(): MPI world size != mesh world size.
add_test(NAME dist_init_world_mismatch
         COMMAND ${TWINKLE_EXPECT_FAIL} 30
                 "world size 4 does not match the device mesh pp=2 x dp=2 x tp=2 \\(8 ranks\\): launch with twinkle-run --nproc_per_node=8 or change the mesh"
                 ${TWINKLE_MPIRUN} -np 4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail mismatch 0)
# initialize(): npu requested in a single process without a launcher (no MPI call).
add_test(NAME dist_init_npu_single_process
         COMMAND ${TWINKLE_EXPECT_FAIL} 10 "^error: device_type 'npu' requested but this build has no NPU backend"
                 ${TWINKLE_DIST_TEST_DIR}/mpi_groups dp=1,device=npu)
add_test(NAME dist_init_cuda_single_process
         COMMAND ${TWINKLE_EXPECT_FAIL} 10
                 "^error: (device_type 'cuda' requested but this build has no CUDA backend|device 'cuda': no GPU visible)"
                 ${TWINKLE_DIST_TEST_DIR}/mpi_groups dp=1,device=cuda)

# A failing rank ends the whole job within 30 s, its message printed (launched by twinkle-run).
add_test(NAME dist_fail_rank_throws
         COMMAND ${TWINKLE_EXPECT_FAIL} 30 "\\[rank 2\\] error: rank 2 failed on purpose \\(mode throw\\)"
                 ${TWINKLE_RUN} --nproc_per_node=4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail throw 2)
add_test(NAME dist_fail_rank_sigkill
         COMMAND ${TWINKLE_EXPECT_FAIL} 30 "process rank 1 .*signal 9"
                 ${TWINKLE_RUN} --nproc_per_node=4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail kill 1)
add_test(NAME dist_fail_rank_segfault
         COMMAND ${TWINKLE_EXPECT_FAIL} 30 "\\[rank 3\\] fatal signal SIGSEGV"
                 ${TWINKLE_RUN} --nproc_per_node=4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail segv 3)
add_test(NAME dist_fail_uncaught_exception
         COMMAND ${TWINKLE_EXPECT_FAIL} 30 "\\[rank 1\\] terminate: uncaught on purpose"
                 ${TWINKLE_RUN} --nproc_per_node=4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail terminate 1)
add_test(NAME dist_fail_nonzero_exit
         COMMAND ${TWINKLE_EXPECT_FAIL} 30 "\\[rank 1\\] exited with code 3"
                 ${TWINKLE_RUN} --nproc_per_node=2 ${TWINKLE_DIST_TEST_DIR}/mpi_fail exit 1)
set_tests_properties(dist_init_world_mismatch dist_init_npu_single_process dist_init_cuda_single_process
                     dist_fail_rank_throws dist_fail_rank_sigkill dist_fail_rank_segfault
                     dist_fail_uncaught_exception dist_fail_nonzero_exit
                     PROPERTIES TIMEOUT 90)  # expect_fail.sh exits 0 only on the expected failure

# Launcher: the mpirun line it builds, and a clean 2-rank run ("--x v" form).
add_test(NAME dist_twinkle_run_dry_run
         COMMAND ${TWINKLE_CHECK_RUN}
  "[^ ]*mpirun -np 64 --oversubscribe (--allow-run-as-root )?--bind-to none --mca mpi_yield_when_idle 1 --mca orte_abort_on_non_zero_status 1 -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=passive -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736 -x LOG_LEVEL -x TWINKLE_FOO prog --flag 'a b'"
                 ${CMAKE_COMMAND} -E env --unset=OMP_NUM_THREADS --unset=OMP_WAIT_POLICY TWINKLE_FOO=bar LOG_LEVEL=DEBUG
                 ${TWINKLE_RUN} --nproc_per_node=64 --dry-run prog --flag "a b")
# Multi-node: the hostfile and per-node mapping, the rsh agent and interfaces (here from the environment),
# the daemons' TCP keepalives; the runs themselves are tests/multinode.cmake's.
add_test(NAME dist_twinkle_run_multinode_dry_run
         COMMAND ${TWINKLE_CHECK_RUN}
  "[^ ]*mpirun -np 8 --hostfile hosts --map-by ppr:4:node (--oversubscribe )?(--allow-run-as-root )?--bind-to none --mca mpi_yield_when_idle 1 --mca orte_abort_on_non_zero_status 1 --mca plm_rsh_agent /x/agent --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1 --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 -x OMP_NUM_THREADS=[0-9]+ -x OMP_WAIT_POLICY=passive -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736 prog"
                 ${CMAKE_COMMAND} -E env --unset=OMP_NUM_THREADS --unset=OMP_WAIT_POLICY --unset=LOG_LEVEL
                 TWINKLE_RSH_AGENT=/x/agent TWINKLE_NET_IFACE=eth1
                 ${TWINKLE_RUN} --nnodes=2 --nproc_per_node=4 --hostfile hosts --dry-run prog)
# --max-restarts: a job that fails every time is started 1 + 2 times, then twinkle-run gives up with its status.
add_test(NAME dist_twinkle_run_max_restarts_gives_up
         COMMAND ${TWINKLE_EXPECT_FAIL} 60
                 "failed \\(exit status [1-9][0-9]*\\) and 2 restart\\(s\\) are used up"
                 ${TWINKLE_RUN} --max-restarts=2 --nproc_per_node=2 ${TWINKLE_DIST_TEST_DIR}/mpi_fail throw 1)
# The collective watchdog: rank 2 never joins the all-reduce (nor fails); the others' watchdogs end
# the job after TWINKLE_COMM_TIMEOUT (twinkle-run --comm-timeout) naming rank, group and call.
add_test(NAME dist_comm_watchdog_ends_hung_collective
         COMMAND ${TWINKLE_EXPECT_FAIL} 30
                 "\\[rank [013]\\] comm watchdog: MPI_Allreduce on process group 'world' \\(4 ranks\\) has not completed after 3 s"
                 ${TWINKLE_RUN} --comm-timeout=3 --nproc_per_node=4 ${TWINKLE_DIST_TEST_DIR}/mpi_fail hang 2)
add_test(NAME dist_comm_watchdog_bad_timeout_refused
         COMMAND ${CMAKE_COMMAND} -E env TWINKLE_COMM_TIMEOUT=soon
                 ${TWINKLE_EXPECT_FAIL} 30 "TWINKLE_COMM_TIMEOUT='soon': expected a number of seconds >= 0"
                 ${TWINKLE_RUN} --nproc_per_node=2 ${TWINKLE_DIST_TEST_DIR}/mpi_fail ok 0)
set_tests_properties(dist_twinkle_run_max_restarts_gives_up dist_comm_watchdog_ends_hung_collective
                     dist_comm_watchdog_bad_timeout_refused PROPERTIES TIMEOUT 90)
add_test(NAME dist_twinkle_run_ok COMMAND ${TWINKLE_RUN} --nproc_per_node 2 ${TWINKLE_DIST_TEST_DIR}/mpi_fail ok 0)
set_tests_properties(dist_twinkle_run_ok PROPERTIES TIMEOUT 60)
add_test(NAME dist_twinkle_run_usage_error
         COMMAND ${TWINKLE_EXPECT_FAIL} 10 "--nnodes=2 needs --hostfile=F" ${TWINKLE_RUN} --nnodes=2 prog)
# "-n 2 prog" (mpirun's spelling) was taken as PROGRAM "-n": mpirun then read -n 2 as its own option
add_test(NAME dist_twinkle_run_short_option_refused
         COMMAND ${TWINKLE_EXPECT_FAIL} 10 "unknown option -n .twinkle-run.s options are torchrun.s long ones, e.g. --nproc_per_node=N"
                 ${TWINKLE_RUN} -n 2 prog)
