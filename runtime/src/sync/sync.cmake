# SPDX-License-Identifier: MIT
# sync.cmake - fleet sync through Redis (runtime/include/nres/sync.h): the
# agent (libnres_sync, static and shared, on top of libnres and hiredis),
# nres-syncd (the agent as a process, for a gateway's mapped shm region),
# and their tests (label redis: a real redis-server started by the test,
# skipped when it is not installed). Without hiredis the component is left
# out with a message.
pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
pkg_check_modules(SYNC_OPENSSL IMPORTED_TARGET openssl)
if(NOT HIREDIS_FOUND OR NOT SYNC_OPENSSL_FOUND)
  message(WARNING "sync: hiredis or OpenSSL not found (Debian libhiredis-dev, libssl-dev): fleet sync left out")
  return()
endif()

set(NRES_SYNC_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/sync.c
  ${CMAKE_CURRENT_LIST_DIR}/scripts.c
  ${CMAKE_CURRENT_LIST_DIR}/reply.c
  ${CMAKE_CURRENT_LIST_DIR}/conn.c
  ${CMAKE_CURRENT_LIST_DIR}/sentinel.c
  ${CMAKE_CURRENT_LIST_DIR}/tls.c
  ${CMAKE_CURRENT_LIST_DIR}/cluster.c
)
foreach(lib nres_sync nres_sync_static)
  if(lib STREQUAL "nres_sync")
    add_library(${lib} SHARED ${NRES_SYNC_SOURCES})
    target_link_libraries(${lib} PUBLIC nres PkgConfig::HIREDIS PkgConfig::SYNC_OPENSSL Threads::Threads)
    set_target_properties(${lib} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
                          VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  else()
    add_library(${lib} STATIC ${NRES_SYNC_SOURCES})
    target_link_libraries(${lib} PUBLIC nres_static PkgConfig::HIREDIS PkgConfig::SYNC_OPENSSL Threads::Threads)
    set_target_properties(${lib} PROPERTIES OUTPUT_NAME nres_sync
                          ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
    # Fat LTO objects, as libnres.a's (CMakeLists.txt): real code beside
    # GCC's IR, so the installed archive links with clang too.
    if(CMAKE_INTERPROCEDURAL_OPTIMIZATION)
      target_compile_options(${lib} PRIVATE -ffat-lto-objects)
    endif()
  endif()
  target_include_directories(${lib} PRIVATE ${CMAKE_SOURCE_DIR}/runtime/src)
  target_compile_options(${lib} PRIVATE ${NRES_WARNINGS})
  target_compile_definitions(${lib} PRIVATE NRES_BUILDING _GNU_SOURCE)
endforeach()

add_executable(nres-syncd ${CMAKE_CURRENT_LIST_DIR}/syncd.c)
target_include_directories(nres-syncd PRIVATE ${CMAKE_SOURCE_DIR}/runtime/src)
target_compile_options(nres-syncd PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nres-syncd PRIVATE _GNU_SOURCE)
target_link_libraries(nres-syncd PRIVATE nres_sync_static)
set_target_properties(nres-syncd PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

nres_add_c_test(sync 300 redis nres_sync_static)
nres_add_c_test(sync_faults 120 sync nres_sync_static)
nres_add_c_test(sync_sentinel 180 redis nres_sync_static)
nres_add_c_test(sync_cluster 180 redis nres_sync_static)
if(TARGET test_sync_cluster)
  set_tests_properties(sync_cluster PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endif()
if(TARGET test_sync_sentinel)
  set_tests_properties(sync_sentinel PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON
    ENVIRONMENT "NRES_SYNCD=$<TARGET_FILE:nres-syncd>")
endif()
if(NRES_TESTS)
  add_test(NAME syncd_flags
           COMMAND bash ${CMAKE_SOURCE_DIR}/spec/sync/syncd_flags.sh $<TARGET_FILE:nres-syncd>)
  set_tests_properties(syncd_flags PROPERTIES TIMEOUT 30 LABELS sync)
endif()
if(TARGET test_sync_faults)
  set_tests_properties(sync_faults PROPERTIES
    ENVIRONMENT "NRES_SYNCD=$<TARGET_FILE:nres-syncd>")
endif()
if(TARGET test_sync)
  set_tests_properties(sync PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON
    ENVIRONMENT "NRES_SYNCD=$<TARGET_FILE:nres-syncd>")
endif()

# bench/fleet.c: accuracy and request-path cost against the sync interval,
# unsynced hosts and a Redis round trip per request (bench/README.md).
if(NRES_BENCH)
  add_executable(bench_fleet ${CMAKE_SOURCE_DIR}/bench/fleet.c)
  target_compile_options(bench_fleet PRIVATE ${NRES_WARNINGS})
  target_compile_definitions(bench_fleet PRIVATE _GNU_SOURCE)
  target_link_libraries(bench_fleet PRIVATE nres_sync_static)
  set_target_properties(bench_fleet PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  # bench/fleet_scale.c: N agents (1 to 1000) on one redis-server: its CPU,
  # commands, round latency and the fleet rate's accuracy.
  add_executable(bench_fleet_scale ${CMAKE_SOURCE_DIR}/bench/fleet_scale.c)
  target_compile_options(bench_fleet_scale PRIVATE ${NRES_WARNINGS})
  target_compile_definitions(bench_fleet_scale PRIVATE _GNU_SOURCE)
  target_include_directories(bench_fleet_scale PRIVATE ${CMAKE_SOURCE_DIR}/runtime/src)
  target_link_libraries(bench_fleet_scale PRIVATE nres_sync_static)
  set_target_properties(bench_fleet_scale PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()

# Two nginx gateways sharing a breaker view through nres-syncd and Redis
# (spec/nginx/fleet.sh): plain builds only, like the other nginx tests.
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  add_test(NAME nginx_fleet
           COMMAND bash ${CMAKE_SOURCE_DIR}/spec/nginx/fleet.sh $<TARGET_FILE:nres>
                   $<TARGET_FILE:nres-syncd>)
  set_tests_properties(nginx_fleet PROPERTIES TIMEOUT 120 LABELS "nginx;redis" RUN_SERIAL ON)
endif()

# nres.sync (lua/nres/sync.lua) against its own redis-server: plain
# builds only (LuaJIT would need the sanitizers' runtimes preloaded).
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  find_program(NRES_SYNC_LUAJIT luajit)
  if(NRES_SYNC_LUAJIT)
    add_test(NAME lua_sync
             COMMAND ${NRES_SYNC_LUAJIT} spec/lua/runner.lua spec/sync/sync_spec.lua
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(lua_sync PROPERTIES TIMEOUT 60 LABELS "redis;lua"
      SKIP_RETURN_CODE 77 RUN_SERIAL ON ENVIRONMENT
      "LUA_PATH=${CMAKE_SOURCE_DIR}/lua/?.lua\\;\\;;NRES_LIB=$<TARGET_FILE:nres>;NRES_SYNC_LIB=$<TARGET_FILE:nres_sync>")
  endif()
endif()
