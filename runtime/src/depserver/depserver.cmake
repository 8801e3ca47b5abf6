# SPDX-License-Identifier: MIT
# depserver.cmake - the dependency server (a static library for nresrun
# plus the nres-depserver executable), the tests of the server and of the
# HTTP client against it, and the transport benchmark. Included after
# runtime/src/exec/http.cmake, which finds http-parser.
# The dependency server: not part of libnres (it is a process of its own);
# nresrun links nres_depserver to offer `nresrun serve`.
add_library(nres_depserver STATIC runtime/src/depserver/depserver.c)
target_include_directories(nres_depserver PUBLIC runtime/src/depserver
  PRIVATE ${HTTP_PARSER_INCLUDE_DIR})
target_compile_options(nres_depserver PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nres_depserver PRIVATE _GNU_SOURCE)
target_link_libraries(nres_depserver PUBLIC PkgConfig::LIBUV ${HTTP_PARSER_LIBRARY} m)

add_executable(nres-depserver runtime/src/depserver/depserver_main.c)
target_compile_options(nres-depserver PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nres-depserver PRIVATE _GNU_SOURCE)
target_link_libraries(nres-depserver PRIVATE nres_depserver)
set_target_properties(nres-depserver PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

nres_add_c_test(depserver 120 http,threads nres_depserver)
if(NRES_TESTS)
  # Its hostile-connections test bounds a fresh client's wait (head
  # timeout + 1 s): run it alone, not beside another test's CPU load.
  set_tests_properties(depserver PROPERTIES RUN_SERIAL ON)
endif()
nres_add_c_test(http 180 http,threads nres_depserver)
if(NRES_TESTS)
  target_compile_definitions(test_depserver PRIVATE
    NRES_DEPSERVER_PATH="$<TARGET_FILE:nres-depserver>")
  add_dependencies(test_depserver nres-depserver)
endif()

if(NRES_BENCH)
  add_executable(bench_http bench/c/bench_http.c)
  target_compile_options(bench_http PRIVATE ${NRES_WARNINGS})
  target_compile_definitions(bench_http PRIVATE _GNU_SOURCE
    NRES_DEPSERVER_PATH="$<TARGET_FILE:nres-depserver>")
  target_link_libraries(bench_http PRIVATE nres_static)
  add_dependencies(bench_http nres-depserver)
  set_target_properties(bench_http PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endif()
