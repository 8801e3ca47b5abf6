# SPDX-License-Identifier: MIT
# nresrun.cmake - the nresrun executable: a LuaJIT host for the scenario
# runner (the runner itself is Lua, in lua/nresrun/). Included by CMakeLists.txt.
pkg_check_modules(LUAJIT REQUIRED IMPORTED_TARGET luajit)

add_executable(nresrun
  runtime/src/nresrun/main.c
  runtime/src/nresrun/luahost.c
  runtime/src/nresrun/child.c
  runtime/src/nresrun/threads.c)
target_include_directories(nresrun PRIVATE runtime/src runtime/include)
target_compile_options(nresrun PRIVATE ${NRES_WARNINGS})
target_compile_definitions(nresrun PRIVATE _GNU_SOURCE
  NRES_SOURCE_LUA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/lua")
# Linked with the shared libnres: the Lua face (ffi.load) then binds the
# same library instance, whose allocator the host counts.
target_link_libraries(nresrun PRIVATE nres PkgConfig::LUAJIT ${CMAKE_DL_LIBS} Threads::Threads)
# With the http component (listed before nresrun in NRES_COMPONENTS):
# `nresrun serve` (the dependency server) and the http cells' event loop.
if(TARGET nres_depserver)
  target_sources(nresrun PRIVATE
    runtime/src/nresrun/loop.c
    runtime/src/nresrun/depchild.c)
  target_compile_definitions(nresrun PRIVATE NRES_HOST_HTTP=1)
  target_link_libraries(nresrun PRIVATE nres_depserver PkgConfig::LIBUV m)
  # With the pool component too (its sources are in libnres): pool jobs
  # completing on the same loop (nres.pool).
  if("pool" IN_LIST NRES_COMPONENTS)
    target_compile_definitions(nresrun PRIVATE NRES_HOST_POOL=1)
  endif()
endif()
# Host functions are called from Lua through the FFI: export them.
set_target_properties(nresrun PROPERTIES ENABLE_EXPORTS ON
  C_VISIBILITY_PRESET default
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  BUILD_RPATH ${CMAKE_BINARY_DIR}
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS nresrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
