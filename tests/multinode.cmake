# tests/multinode.cmake — multi-node jobs on simulated nodes: tests/multinode/nodes.sh makes
# Linux network namespaces joined by a bridge (each node its own network stack, hostname and
# address; OpenMPI between them over TCP), set up and torn down by CTest fixtures (the cleanup
# runs after a failure too). Needs root and `ip netns`; elsewhere the fixture and every test
# that needs it print the reason and exit 77 (skipped).
set(TWINKLE_NODES ${CMAKE_SOURCE_DIR}/tests/multinode/nodes.sh)
set(TWINKLE_NODES_DIR ${CMAKE_BINARY_DIR}/tests/multinode)
set(TWINKLE_MULTINODE_CHECK ${CMAKE_SOURCE_DIR}/tests/multinode/check_multinode.py)

# Two nodes (the recipes' 2 x 4 layouts) and four (4 x 2).
foreach(n 2 4)
  add_test(NAME multinode_nodes${n}_up COMMAND ${TWINKLE_NODES} up ${TWINKLE_NODES_DIR}/nodes${n} ${n})
  add_test(NAME multinode_nodes${n}_down COMMAND ${TWINKLE_NODES} down ${TWINKLE_NODES_DIR}/nodes${n})
  set_tests_properties(multinode_nodes${n}_up PROPERTIES FIXTURES_SETUP multinode${n} SKIP_RETURN_CODE 77 TIMEOUT 60)
  set_tests_properties(multinode_nodes${n}_down PROPERTIES FIXTURES_CLEANUP multinode${n} TIMEOUT 60)
endforeach()

# The three cookbook recipes on 2 nodes x 4 ranks == on 1 node x 8 ranks: every step's loss and
# grad norm (MoE: expert grad norm, aux loss, expert loads) bit for bit, the final checkpoint's
# files byte-identical. pp crosses the nodes in all three (Megatron's rank order tp-cp-ep-dp-pp).
foreach(spec "tp_recipe;3" "moe_recipe;2" "moe_cp_recipe;2")
  list(GET spec 0 recipe)
  list(GET spec 1 steps)
  add_test(NAME multinode_${recipe}_2x4_equals_1x8
           COMMAND ${TWINKLE_CHECK_RUN} "check_multinode ${recipe}: 2x4 == 1x8, ${steps} steps, 0 mismatches"
                   ${TWINKLE_REF_PYTHON} ${TWINKLE_MULTINODE_CHECK} --build ${CMAKE_BINARY_DIR}
                   --nodes ${TWINKLE_NODES_DIR}/nodes2 --recipe ${recipe} --steps ${steps})
  set_tests_properties(multinode_${recipe}_2x4_equals_1x8 PROPERTIES FIXTURES_REQUIRED multinode2
                       SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2 RESOURCE_LOCK multinode2)
endforeach()
# The dense recipe on 4 nodes x 2 ranks (tp inside a node; dp and pp across) == 1 node x 8 ranks.
add_test(NAME multinode_tp_recipe_4x2_equals_1x8
         COMMAND ${TWINKLE_CHECK_RUN} "check_multinode tp_recipe: 4x2 == 1x8, 2 steps, 0 mismatches"
                 ${TWINKLE_REF_PYTHON} ${TWINKLE_MULTINODE_CHECK} --build ${CMAKE_BINARY_DIR}
                 --nodes ${TWINKLE_NODES_DIR}/nodes4 --nnodes 4 --nproc-per-node 2 --recipe tp_recipe --steps 2)
set_tests_properties(multinode_tp_recipe_4x2_equals_1x8 PROPERTIES FIXTURES_REQUIRED multinode4
                     SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2 RESOURCE_LOCK multinode4)

# A rank SIGKILLed in step 5 (TWINKLE_FAULT_KILL) with --save-interval 2: twinkle-run
# --max-restarts 1 starts the 2-node job again and the recipe resumes (--resume auto) from
# checkpoint-step-4; and a restart onto one node (same world size) after the 2-node job died.
# Both equal the uninterrupted 1-node run bit for bit (metrics, every checkpoint file).
foreach(case restart fewer_nodes)
  add_test(NAME multinode_killed_rank_${case}_resumes_exactly
           COMMAND ${TWINKLE_CHECK_RUN}
                   "check_restart ${case}: killed at step 5, resumed, 6 steps equal the uninterrupted run, 0 mismatches"
                   ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/multinode/check_restart.py --build ${CMAKE_BINARY_DIR}
                   --nodes ${TWINKLE_NODES_DIR}/nodes2 --case ${case})
  set_tests_properties(multinode_killed_rank_${case}_resumes_exactly PROPERTIES FIXTURES_REQUIRED multinode2
                       SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2 RESOURCE_LOCK multinode2)
endforeach()

# Slurm on the two nodes (slurmctld on n0, a slurmd on each; auth/none, no munge): the README's
# line `srun --mpi=pmix -N 2 --ntasks-per-node=4 tp_recipe` equals the same run under twinkle-run.
add_test(NAME multinode_slurm2_up COMMAND ${TWINKLE_NODES} slurm-up ${TWINKLE_NODES_DIR}/nodes2)
add_test(NAME multinode_slurm2_down COMMAND ${TWINKLE_NODES} slurm-down ${TWINKLE_NODES_DIR}/nodes2)
set_tests_properties(multinode_slurm2_up PROPERTIES FIXTURES_SETUP multinode2_slurm FIXTURES_REQUIRED multinode2
                     SKIP_RETURN_CODE 77 TIMEOUT 120)
set_tests_properties(multinode_slurm2_down PROPERTIES FIXTURES_CLEANUP multinode2_slurm FIXTURES_REQUIRED multinode2
                     TIMEOUT 60)
add_test(NAME multinode_srun_pmix_tp_recipe_equals_twinkle_run
         COMMAND ${TWINKLE_CHECK_RUN} "check_multinode tp_recipe: 2x4 == srun, 3 steps, 0 mismatches"
                 ${TWINKLE_REF_PYTHON} ${TWINKLE_MULTINODE_CHECK} --build ${CMAKE_BINARY_DIR}
                 --nodes ${TWINKLE_NODES_DIR}/nodes2 --recipe tp_recipe --steps 3 --reference srun)
set_tests_properties(multinode_srun_pmix_tp_recipe_equals_twinkle_run PROPERTIES
                     FIXTURES_REQUIRED "multinode2;multinode2_slurm" SKIP_RETURN_CODE 77 TIMEOUT 600 PROCESSORS 2
                     RESOURCE_LOCK multinode2)

# n1's link brought down after step 2: the job ends (non-zero) within 60 s naming the lost host or
# the rank / group / call that waits for it, never a hang.
add_test(NAME multinode_link_down_ends_job
         COMMAND ${TWINKLE_CHECK_RUN}
                 "check_link_failure: n1's link down at step 2, the job ended in [0-9]+ s \\(< 60 s\\), the unreachable host or rank named"
                 ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/multinode/check_link_failure.py
                 --build ${CMAKE_BINARY_DIR} --nodes ${TWINKLE_NODES_DIR}/nodes2)
set_tests_properties(multinode_link_down_ends_job PROPERTIES FIXTURES_REQUIRED multinode2 SKIP_RETURN_CODE 77
                     TIMEOUT 400 PROCESSORS 2 RESOURCE_LOCK multinode2)
