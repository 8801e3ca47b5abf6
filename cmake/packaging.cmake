# packaging.cmake - what `cmake --install` puts where, split into four
# install components, and the Debian packages CPack makes of them
# (`cpack -G DEB` in a build tree). Included at the end of CMakeLists.txt.
#
#   lib      libnres.so.* (the runtime)                        -> libnres0
#   dev      headers, libnres.a, the libnres.so link, nres.pc  -> libnres-dev
#   lua      the library's Lua face: nres.lua, nres/, presets  -> lua-nres
#   nresrun  the harness: nresrun, nres-depserver, nresrun*.lua -> nresrun
#   sync     libnres_sync.so.*, nres-syncd (with hiredis)        -> nres-sync
#   ngx      ngx_http_nres_module.so (with nginx-dev; its install
#            rules: runtime/src/ngx/ngx.cmake)           -> libnginx-mod-http-nres
#
# NRES_INSTALL_LUADIR is where the Lua modules go (relative to the prefix,
# or absolute: the rockspec points it at the rock's Lua directory).
set(NRES_INSTALL_LUADIR "${CMAKE_INSTALL_DATADIR}/lua/5.1" CACHE STRING
    "Lua module directory (relative to the install prefix, or absolute)")
set(NRES_PACKAGE_CONTACT "nres maintainers <nres@localhost>" CACHE STRING
    "Maintainer field of the Debian packages")

install(TARGETS nres LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT lib NAMELINK_COMPONENT dev)
install(TARGETS nres_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT dev)
install(FILES runtime/include/nres.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev)
install(DIRECTORY runtime/include/nres DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/include/nres/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/nres COMPONENT dev)

# nres.pc finds its prefix from its own place, so --prefix at install (and
# an unpacked package) works. Libs.private: what libnres.a needs.
file(RELATIVE_PATH NRES_PC_TO_PREFIX "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" NRES_PC_TO_PREFIX "${NRES_PC_TO_PREFIX}")
set(NRES_PC_LIBS_PRIVATE "")
if(HTTP_PARSER_LIBRARY)
  string(APPEND NRES_PC_LIBS_PRIVATE "-lhttp_parser ")
endif()
string(APPEND NRES_PC_LIBS_PRIVATE "-lpthread -lm")
configure_file(runtime/nres.pc.in ${CMAKE_BINARY_DIR}/nres.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/nres.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The Lua modules, by namespace: nresrun* is the harness, the rest the
# library's face (whatever lua/ holds at configure time).
file(GLOB NRES_LUA_ENTRIES RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/lua
     ${CMAKE_CURRENT_SOURCE_DIR}/lua/*)
foreach(entry ${NRES_LUA_ENTRIES})
  if(entry MATCHES "^nresrun")
    set(component nresrun)
  else()
    set(component lua)
  endif()
  if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/lua/${entry})
    install(DIRECTORY lua/${entry} DESTINATION ${NRES_INSTALL_LUADIR}
            COMPONENT ${component})
  else()
    install(FILES lua/${entry} DESTINATION ${NRES_INSTALL_LUADIR}
            COMPONENT ${component})
  endif()
endforeach()
install(DIRECTORY policies/ DESTINATION ${NRES_INSTALL_LUADIR}/nres/policies
        COMPONENT lua)

# nresrun itself is installed by its fragment (component nresrun, set
# around its inclusion); the standalone dependency server goes with it.
if(TARGET nresrun AND TARGET nres-depserver)
  install(TARGETS nres-depserver RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT nresrun)
endif()

# The fleet agent (runtime/src/sync, needs hiredis): libnres_sync and the
# nres-syncd process that runs beside a gateway; its static library and
# the headers go with the dev files.
if(TARGET nres_sync)
  install(TARGETS nres_sync LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT sync NAMELINK_COMPONENT dev)
  install(TARGETS nres_sync_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT dev)
  install(TARGETS nres-syncd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT sync)
endif()

# ------------------------------------------------------------------ CPack
set(CPACK_PACKAGE_NAME nres)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "resilience runtime: retries, deadlines, budgets, breakers, limiters, hedging")
set(CPACK_PACKAGE_CONTACT "${NRES_PACKAGE_CONTACT}")
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# nresrun links libnres.so.0, which is ours: dpkg-shlibdeps finds it here.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENTS_ALL lib dev lua)
if(TARGET nresrun)
  list(APPEND CPACK_COMPONENTS_ALL nresrun)
endif()
if(TARGET nres_sync)
  list(APPEND CPACK_COMPONENTS_ALL sync)
endif()
if(TARGET nres_ngx_module)
  list(APPEND CPACK_COMPONENTS_ALL ngx)
endif()

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libnres${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "nres resilience runtime - shared library\n libnres: retries with backoff, deadlines, retry budgets, circuit breakers,\n rate and concurrency limits and hedging for calls to dependencies.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnres-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libuv1-dev, libhttp-parser-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "nres resilience runtime - development files\n Headers, the static library and nres.pc (pkg-config --cflags --libs nres).")

set(CPACK_DEBIAN_LUA_PACKAGE_NAME lua-nres)
set(CPACK_DEBIAN_LUA_PACKAGE_SECTION interpreters)
set(CPACK_DEBIAN_LUA_PACKAGE_ARCHITECTURE all)
set(CPACK_COMPONENT_LUA_DEPENDS lib)
set(CPACK_COMPONENT_LUA_DESCRIPTION
    "nres resilience runtime - LuaJIT module\n require \"nres\": policies for LuaJIT and OpenResty, on libnres through the FFI.")

set(CPACK_DEBIAN_NRESRUN_PACKAGE_NAME nresrun)
set(CPACK_DEBIAN_NRESRUN_PACKAGE_SECTION devel)
set(CPACK_COMPONENT_NRESRUN_DEPENDS lib lua)
set(CPACK_COMPONENT_NRESRUN_DESCRIPTION
    "nres resilience runtime - scenario harness\n nresrun runs resilience scenarios (require \"nresrun\"); nres-depserver is\n the HTTP dependency server they drive.")

set(CPACK_DEBIAN_SYNC_PACKAGE_NAME nres-sync)
set(CPACK_DEBIAN_SYNC_PACKAGE_SECTION net)
set(CPACK_COMPONENT_SYNC_DEPENDS lib)
set(CPACK_COMPONENT_SYNC_DESCRIPTION
    "nres resilience runtime - fleet sync through Redis\n libnres_sync and nres-syncd: one retry budget, rate limit and breaker view\n per scope across many processes or gateways (nres/sync.h).")

# Named as Debian's nginx module packages are; the nginx ABI it was built
# for (nginx-dev's) as they depend on it; the Lua face declares its
# upstreams (init_by_lua), so lua-nres and the Lua module come with it.
set(CPACK_DEBIAN_NGX_PACKAGE_NAME libnginx-mod-http-nres)
set(CPACK_DEBIAN_NGX_PACKAGE_SECTION httpd)
set(CPACK_COMPONENT_NGX_DEPENDS lib lua)
set(CPACK_DEBIAN_NGX_PACKAGE_DEPENDS "libnginx-mod-http-lua")
if(NRES_NGX_ABI)
  string(APPEND CPACK_DEBIAN_NGX_PACKAGE_DEPENDS ", ${NRES_NGX_ABI}")
endif()
set(CPACK_COMPONENT_NGX_DESCRIPTION
    "nres resilience runtime - nginx module\n ngx_http_nres_module: nginx's proxy moves the bytes, libnres decides (peer\n choice, retries, deadlines, breakers, budgets) with no Lua phase per\n request: load_module modules/ngx_http_nres_module.so; after the Lua module.")

# Every package carries the licence as Debian wants it: the
# machine-readable copyright file in /usr/share/doc/<package>.
foreach(component ${CPACK_COMPONENTS_ALL})
  string(TOUPPER ${component} upper)
  install(FILES cmake/debian/copyright
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME}
          COMPONENT ${component})
endforeach()

include(CPack)
