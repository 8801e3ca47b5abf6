# http.cmake - the HTTP component: the client handler (in libnres), the
# dependency server (a static library for nresrun plus the nres-depserver
# executable), their tests and the transport benchmark.
#
# http-parser (Debian's libhttp-parser-dev) ships no pkg-config file, so it
# is found by hand. llhttp, its successor, is not packaged in Debian 12.
find_path(HTTP_PARSER_INCLUDE_DIR http_parser.h)
find_library(HTTP_PARSER_LIBRARY http_parser)
if(NOT HTTP_PARSER_INCLUDE_DIR OR NOT HTTP_PARSER_LIBRARY)
  message(FATAL_ERROR "http_parser not found: apt-get install libhttp-parser-dev")
endif()

target_sources(nres_objects PRIVATE
  runtime/src/exec/http.c
  runtime/src/exec/http_pool.c
  runtime/src/exec/http_retry_after.c)
target_include_directories(nres_objects PRIVATE ${HTTP_PARSER_INCLUDE_DIR})
target_link_libraries(nres_objects PUBLIC ${HTTP_PARSER_LIBRARY})
target_link_libraries(nres PUBLIC ${HTTP_PARSER_LIBRARY})
target_link_libraries(nres_static PUBLIC ${HTTP_PARSER_LIBRARY})

# The dependency server: not part of libnres (it is a process of its own);
# nresrun links nres_depserver to offer `nresrun serve`.
add_library(nres_depserver STATIC runtime/src/host/depserver.c)
target_include_directories(nres_depserver PUBLIC runtime/src/host
  PRIVATE ${HTTP_PARSER_INCLUDE_DIR})
target_compile_options(nres_depserver PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nres_depserver PRIVATE _GNU_SOURCE)
target_link_libraries(nres_depserver PUBLIC PkgConfig::LIBUV ${HTTP_PARSER_LIBRARY} m)

add_executable(nres-depserver runtime/src/host/depserver_main.c)
target_compile_options(nres-depserver PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nres-depserver PRIVATE _GNU_SOURCE)
target_link_libraries(nres-depserver PRIVATE nres_depserver)
set_target_properties(nres-depserver PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

nres_add_c_test(retry_after 20 http)
nres_add_c_test(depserver 120 http,threads nres_depserver)
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
