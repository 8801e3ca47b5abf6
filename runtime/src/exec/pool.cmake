# SPDX-License-Identifier: MIT
# pool.cmake - the work pool's build fragment, included by CMakeLists.txt.
#
# Sources of the pool (threads and queues, gates, execution log, libuv
# bridge, policy-driven pool calls), their cmocka tests and bench_pool,
# the benchmarks of the second reference document.

target_sources(nres_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/gate.c
  ${CMAKE_CURRENT_LIST_DIR}/joblog.c
  ${CMAKE_CURRENT_LIST_DIR}/pool_uv.c
  ${CMAKE_CURRENT_LIST_DIR}/pool_call.c
)

nres_add_c_test(pool 120 exec,threads)
nres_add_c_test(gate 60 exec,threads)
nres_add_c_test(joblog 60 exec,threads)
nres_add_c_test(pool_uv 60 exec,threads)
nres_add_c_test(pool_call 60 exec,threads)

if(NRES_BENCH)
  add_executable(bench_pool bench/c/bench_pool.c)
  target_compile_options(bench_pool PRIVATE ${NRES_WARNINGS})
  target_compile_definitions(bench_pool PRIVATE _GNU_SOURCE
    NRES_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
  target_link_libraries(bench_pool PRIVATE nres_static)
  set_target_properties(bench_pool PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
