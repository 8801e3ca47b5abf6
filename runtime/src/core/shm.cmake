# SPDX-License-Identifier: MIT
# shm.cmake - keyed policy state in shared memory (runtime/src/core/shm.c),
# its cmocka test (built with the protocol's kill hooks), the gateway's Lua
# spec (nres.shm and nres.ngx outside nginx) and its integration test in a
# real nginx (spec/nginx/run.sh, balancer mode: spec/nginx/balancer.sh). The last ones load libnres into LuaJIT, so
# they are registered only in builds without sanitizers (LuaJIT and nginx
# would need their runtimes preloaded).
target_sources(nres_objects PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/core/shm.c
                                    ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/core/shm_file.c
                                    ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/core/shm_migrate.c)

nres_add_c_test(shm 120 core,threads)
nres_add_c_test(shm_file 20 core)
nres_add_c_test(shm_migrate 30 core)
# test_shm kills processes at each step of the claim protocol: it builds
# its own shm.c with the step hooks (its definitions take precedence over
# the archive's shm.o, which is then not linked in).
if(TARGET test_shm)
  target_sources(test_shm PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/core/shm.c)
  target_compile_definitions(test_shm PRIVATE NRES_BUILDING NRES_SHM_TEST_HOOKS)
endif()

if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  find_program(NRES_SHM_LUAJIT luajit)
  if(NRES_SHM_LUAJIT)
    add_test(NAME lua_gateway
             COMMAND ${NRES_SHM_LUAJIT} spec/lua/runner.lua spec/lua/gateway_spec.lua
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    set_tests_properties(lua_gateway PROPERTIES TIMEOUT 60 LABELS lua ENVIRONMENT
      "LUA_PATH=${CMAKE_CURRENT_SOURCE_DIR}/lua/?.lua\\;\\;;NRES_LIB=$<TARGET_FILE:nres>")
  endif()
  add_test(NAME nginx
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/run.sh $<TARGET_FILE:nres>)
  set_tests_properties(nginx PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
  # balancer mode (spec/nginx/balancer.sh): peers, ejection, reloads. The
  # nginx tests run alone: their figures (amplification, probes per break)
  # are per second of a real clock, which a CPU shared with other tests
  # skews.
  add_test(NAME nginx_balancer
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/balancer.sh $<TARGET_FILE:nres>)
  set_tests_properties(nginx_balancer PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
  # peer weights and a backup peer (spec/nginx/weights.sh, issue 25)
  add_test(NAME nginx_weights
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/weights.sh $<TARGET_FILE:nres>)
  set_tests_properties(nginx_weights PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
  # The operator's side (spec/nginx/ops.sh): scrapes from binary client
  # keys (promtool), latency histograms, transitions in error.log, the
  # control API, the status page in headless Chromium (its screenshot in
  # the build tree's ops/ directory).
  add_test(NAME nginx_ops
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/ops.sh $<TARGET_FILE:nres>)
  set_tests_properties(nginx_ops PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON
                       ENVIRONMENT "NRES_OPS_OUT=${CMAKE_BINARY_DIR}/ops")
  # Hedging in the cosocket mode, against nres-depserver (300 calls a scope).
  add_test(NAME nginx_hedge
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/hedge.sh $<TARGET_FILE:nres> 300)
  set_tests_properties(nginx_hedge PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
endif()
