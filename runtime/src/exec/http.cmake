# SPDX-License-Identifier: MIT
# http.cmake - the HTTP client of libnres (the handler on libuv and
# http-parser, its pool and the Retry-After parser) and its parser test.
# The dependency server it is tested against has its own fragment
# (runtime/src/depserver/depserver.cmake), included after this one.
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

nres_add_c_test(retry_after 20 http)
