# SPDX-License-Identifier: MIT
# fuzz.cmake - the libFuzzer targets (spec/fuzz/fuzz_*.c), included from
# CMakeLists.txt with -DNRES_FUZZ=ON after the components' fragments:
#
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DNRES_SANITIZE=address \
#         -DNRES_FUZZ=ON -DNRES_TESTS=OFF -DNRES_BENCH=OFF
#
# The library and the dependency server are compiled with coverage
# instrumentation (-fsanitize=fuzzer-no-link) on top of the ASan+UBSan of
# NRES_SANITIZE=address (which also keeps link-time optimisation off); each
# target links libFuzzer's main (-fsanitize=fuzzer). Two ctest tests per
# target, both labelled fuzz: <target>_corpus runs every committed input of
# spec/fuzz/corpus/<target>/ once (a regression test), <target> fuzzes for
# NRES_FUZZ_SECONDS, writing what it finds to the build tree's
# fuzz/corpus/<target>/, never to the committed corpus, and any crash to
# fuzz/artifacts/. spec/fuzz/README.md says how to run them longer.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "NRES_FUZZ needs clang (libFuzzer): -DCMAKE_C_COMPILER=clang")
endif()
if(NOT NRES_SANITIZE STREQUAL "address")
  message(FATAL_ERROR "NRES_FUZZ needs -DNRES_SANITIZE=address: the targets run under ASan+UBSan")
endif()

set(NRES_FUZZ_SECONDS 20 CACHE STRING "how long each fuzz test runs, in seconds")
set(NRES_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/spec/fuzz)

# Coverage feedback from the code under test, not only from the targets.
target_compile_options(nres_objects PRIVATE -fsanitize=fuzzer-no-link)
if(TARGET nres_depserver)
  target_compile_options(nres_depserver PRIVATE -fsanitize=fuzzer-no-link)
endif()

# ctest is enabled here too: a fuzz tree is usually built without the
# cmocka tests (NRES_TESTS=OFF).
enable_testing()
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz/artifacts)

# nres_add_fuzz(NAME [LIBS...]): spec/fuzz/NAME.c, its corpus test and its
# timed run.
function(nres_add_fuzz name)
  add_executable(${name} ${NRES_FUZZ_DIR}/${name}.c)
  target_include_directories(${name} PRIVATE runtime/src spec/c ${NRES_FUZZ_DIR})
  target_compile_options(${name} PRIVATE ${NRES_WARNINGS} -fsanitize=fuzzer)
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE nres_static ${ARGN})
  set_target_properties(${name} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)

  set(seeds ${NRES_FUZZ_DIR}/corpus/${name})
  set(found ${CMAKE_BINARY_DIR}/fuzz/corpus/${name})
  file(MAKE_DIRECTORY ${found})
  # -runs=0: read and run every input once, then stop.
  add_test(NAME ${name}_corpus COMMAND ${name} -runs=0 ${seeds})
  set_tests_properties(${name}_corpus PROPERTIES TIMEOUT 120 LABELS fuzz)
  # New inputs go to the first directory; the seeds are only read.
  add_test(NAME ${name}
           COMMAND ${name} -max_total_time=${NRES_FUZZ_SECONDS} -timeout=10
                   -rss_limit_mb=2048 -print_final_stats=1
                   -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz/artifacts/${name}-
                   ${found} ${seeds})
  math(EXPR limit "${NRES_FUZZ_SECONDS} + 60")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${limit} LABELS fuzz)
endfunction()

nres_add_fuzz(fuzz_policy)
nres_add_fuzz(fuzz_dns_reply)   # runtime/src/gateway/dns.c
if(TARGET nres_depserver)   # the http component
  nres_add_fuzz(fuzz_retry_after)
  nres_add_fuzz(fuzz_http_response)
  nres_add_fuzz(fuzz_http_wire)
  nres_add_fuzz(fuzz_depserver nres_depserver)
  nres_add_fuzz(fuzz_depserver_wire nres_depserver)
endif()
if(";${NRES_COMPONENTS};" MATCHES ";shm;")
  nres_add_fuzz(fuzz_shm)   # spec/c/shm_ops.h, shared with test_shm
  nres_add_fuzz(fuzz_control_json)   # the gateway (in the shm component)
endif()
if(TARGET nres_sync_static)   # the sync component, with hiredis
  target_compile_options(nres_sync_static PRIVATE -fsanitize=fuzzer-no-link)
  nres_add_fuzz(fuzz_sync_reply nres_sync_static)
endif()
