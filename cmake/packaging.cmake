# SPDX-License-Identifier: MIT
# packaging.cmake - what `cmake --install` puts where, split into four
# install components, and the Debian packages CPack makes of them
# (`cpack -G DEB` in a build tree). Included at the end of CMakeLists.txt.
#
#   lib      libnres.so.* (the runtime)                        -> libnres0
#   dev      headers, libnres.a, the libnres.so link, nres.pc  -> libnres-dev
#   lua      the library's Lua face: nres.lua, nres/, presets  -> lua-nres
#   nresrun  the harness: nresrun, nres-depserver, nresrun*.lua -> nresrun
#   synclib  libnres_sync.so.* (with hiredis)                  -> libnres-sync0
#   sync     nres-syncd (with hiredis)                          -> nres-sync
#   ngx      ngx_http_nres_module.so (with nginx-dev; its install
#            rules: runtime/src/ngx/ngx.cmake)           -> libnginx-mod-http-nres
#
# NRES_INSTALL_LUADIR is where the Lua modules go (relative to the prefix,
# or absolute: the rockspec points it at the rock's Lua directory).
set(NRES_INSTALL_LUADIR "${CMAKE_INSTALL_DATADIR}/lua/5.1" CACHE STRING
    "Lua module directory (relative to the install prefix, or absolute)")
# example.org (RFC 2606) stands in until the project has an address of its
# own: whoever publishes the packages sets NRES_PACKAGE_CONTACT.
set(NRES_PACKAGE_CONTACT "The nres authors <nres@example.org>" CACHE STRING
    "Maintainer field of the Debian packages")
if(NRES_PACKAGE_CONTACT STREQUAL "nres maintainers <nres@localhost>")   # an older tree's
  set(NRES_PACKAGE_CONTACT "The nres authors <nres@example.org>" CACHE STRING
      "Maintainer field of the Debian packages" FORCE)
endif()

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
# nres-syncd process that runs beside a gateway; its static library, the
# libnres_sync.so link and libnres_sync.pc go with the dev files (and
# libnres-dev depends on libnres-sync0, so the link never dangles).
if(TARGET nres_sync)
  configure_file(runtime/libnres_sync.pc.in ${CMAKE_BINARY_DIR}/libnres_sync.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/libnres_sync.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
  install(TARGETS nres_sync LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT synclib NAMELINK_COMPONENT dev)
  install(TARGETS nres_sync_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT dev)
  install(TARGETS nres-syncd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT sync)
endif()

# Manual pages, made at build time from each program's --help by
# cmake/manpage.awk, so a page cannot drift from its --help (the help text
# is the one source), compressed as Debian wants and installed with the
# program's component.
function(nres_manpage target name section summary component)
  set(page ${CMAKE_BINARY_DIR}/man/${name}.${section})
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND sh -c "\"$1\" --help | awk -v name=\"$2\" -v section=$3 -v summary=\"$4\" -v version=$5 -f \"$6\" > \"$7\" && gzip -9nf \"$7\""
            manpage $<TARGET_FILE:${target}> ${name} ${section} "${summary}" ${PROJECT_VERSION}
            ${CMAKE_CURRENT_SOURCE_DIR}/cmake/manpage.awk ${page}
    DEPENDS ${target} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/manpage.awk ${ARGN}
    COMMENT "Manual page ${name}(${section}) from ${name} --help"
    VERBATIM)
  add_custom_target(man_${name} ALL DEPENDS ${page}.gz)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
          COMPONENT ${component})
endfunction()
# Sanitizer trees install nothing (spec/install/install.cmake), and running
# their programs at build time could fail on a leak report: no pages there.
if(NOT NRES_SANITIZE STREQUAL "")
  # nothing: the plain tree makes the pages
elseif(TARGET nresrun)
  # nresrun's help text is lua/nresrun/cli.lua's USAGE.
  nres_manpage(nresrun nresrun 1 "run resilience stress scenarios and simulations"
               nresrun ${CMAKE_CURRENT_SOURCE_DIR}/lua/nresrun/cli.lua)
endif()
if(TARGET nresrun AND TARGET nres-depserver AND NRES_SANITIZE STREQUAL "")   # as its install
  nres_manpage(nres-depserver nres-depserver 1
               "HTTP dependency server for resilience tests" nresrun)
endif()
if(TARGET nres-syncd AND NRES_SANITIZE STREQUAL "")
  nres_manpage(nres-syncd nres-syncd 8
               "sync nres gateways' budgets, rate limits and breakers through Redis" sync)
endif()

# ------------------------------------------------------------------ CPack
set(CPACK_PACKAGE_NAME nres)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "resilience runtime: retries, deadlines, budgets, breakers, limiters, hedging")
set(CPACK_PACKAGE_CONTACT "${NRES_PACKAGE_CONTACT}")
# Debian wants binaries stripped (cmake --install --strip; the nginx
# module, installed as a file, is stripped by its own rule in ngx.cmake),
# a shlibs file and the ldconfig trigger for each shared library.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The ldconfig trigger (cmake/debian/triggers) for the packages with a
# shared library. lintian then still warns maintscript-calls-ldconfig:
# CPack writes a postinst and a postrm calling ldconfig for any library in
# /usr/lib, unless we supply our own, which would be empty (lintian:
# maintainer-script-empty). The calls are redundant with the trigger and
# harmless, so the warning stays.
#   lintian-allow: libnres0 maintscript-calls-ldconfig
#   lintian-allow: libnres-sync0 maintscript-calls-ldconfig
# Every other lintian warning or error fails spec/install/lintian.sh, which
# reads these lintian-allow lines.
foreach(component lib synclib)
  string(TOUPPER ${component} upper)
  set(CPACK_DEBIAN_${upper}_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian/triggers)
endforeach()
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
  list(APPEND CPACK_COMPONENTS_ALL synclib sync)
endif()
if(TARGET nres_ngx_module)
  list(APPEND CPACK_COMPONENTS_ALL ngx)
endif()

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libnres${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "nres resilience runtime - shared library\n libnres decides, for every call a program makes to a dependency, whether\n to make it, how long to let it run and when to try again: retries with\n backoff, deadlines, retry budgets, circuit breakers, rate and concurrency\n limits and hedging.")

# nres.pc and libnres_sync.pc go to the build's libdir (lib for a prefix
# configured as /usr/local), not to the multiarch pkgconfig folder, so
# lintian warns that a cross build cannot find them. The packages are for
# native builds; a cross build points PKG_CONFIG_PATH at them.
#   lintian-allow: libnres-dev pkg-config-unavailable-for-cross-compilation
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnres-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libuv1-dev, libhttp-parser-dev")
if(TARGET nres_sync)
  list(APPEND CPACK_COMPONENT_DEV_DEPENDS synclib)
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libhiredis-dev")
endif()
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "nres resilience runtime - development files\n The headers, the static libraries, and the pkg-config files nres.pc and\n libnres_sync.pc for building C programs against libnres.")

set(CPACK_DEBIAN_LUA_PACKAGE_NAME lua-nres)
set(CPACK_DEBIAN_LUA_PACKAGE_SECTION interpreters)
set(CPACK_DEBIAN_LUA_PACKAGE_ARCHITECTURE all)
set(CPACK_COMPONENT_LUA_DEPENDS lib)
set(CPACK_COMPONENT_LUA_DESCRIPTION
    "nres resilience runtime - LuaJIT module\n The nres module: resilience policies for LuaJIT and OpenResty, on libnres\n through the FFI, and its presets. Plain Lua 5.1 cannot run it.")

set(CPACK_DEBIAN_NRESRUN_PACKAGE_NAME nresrun)
set(CPACK_DEBIAN_NRESRUN_PACKAGE_SECTION devel)
set(CPACK_COMPONENT_NRESRUN_DEPENDS lib lua)
set(CPACK_COMPONENT_NRESRUN_DESCRIPTION
    "nres resilience runtime - scenario harness\n nresrun runs stress scenarios and simulations that compare resilience\n policies; nres-depserver is the HTTP dependency server they call.")

set(CPACK_DEBIAN_SYNCLIB_PACKAGE_NAME libnres-sync${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_SYNCLIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_SYNCLIB_DEPENDS lib)
set(CPACK_COMPONENT_SYNCLIB_DESCRIPTION
    "nres resilience runtime - fleet sync library\n libnres_sync shares one retry budget, one rate limit and one breaker view\n per scope across many processes or gateways, through Redis.")

# nres-syncd links libnres_sync and libnres statically: it needs neither
# shared library, but comes with libnres0 as the gateway it serves does.
set(CPACK_DEBIAN_SYNC_PACKAGE_NAME nres-sync)
set(CPACK_DEBIAN_SYNC_PACKAGE_SECTION net)
set(CPACK_COMPONENT_SYNC_DEPENDS lib)
set(CPACK_COMPONENT_SYNC_DESCRIPTION
    "nres resilience runtime - fleet sync agent\n nres-syncd runs beside an nginx gateway and syncs its shared tables with\n Redis: one retry budget, rate limit and breaker view across the fleet.")

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
    "nres resilience runtime - nginx module\n ngx_http_nres_module lets nginx's proxy move the bytes while libnres\n decides the peer, the retries, deadlines, breakers and budgets, with no\n Lua phase per request. Load it after the Lua module.")

# Every package carries, in /usr/share/doc/<package>, the licence as
# Debian wants it (the machine-readable copyright file) and, being a
# native package, changelog.gz: one entry for this version pointing at
# CHANGELOG.md, dated SOURCE_DATE_EPOCH when set (reproducible builds),
# compressed with gzip -9n as lintian asks.
# The rock (nres-*.rockspec) installs into a LuaRocks tree, not a prefix:
# it turns these off (-DNRES_INSTALL_DOCS=OFF) so nothing lands in
# CMAKE_INSTALL_PREFIX.
option(NRES_INSTALL_DOCS "install the copyright file and changelog per component" ON)
string(TIMESTAMP NRES_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(cmake/debian/changelog.in ${CMAKE_BINARY_DIR}/debian/changelog @ONLY)
execute_process(COMMAND gzip -9nf -k ${CMAKE_BINARY_DIR}/debian/changelog
                RESULT_VARIABLE gzip_rc)
if(NOT gzip_rc EQUAL 0)
  message(FATAL_ERROR "gzip of the Debian changelog failed")
endif()
foreach(component ${CPACK_COMPONENTS_ALL})
  if(NOT NRES_INSTALL_DOCS)
    break()
  endif()
  string(TOUPPER ${component} upper)
  install(FILES cmake/debian/copyright ${CMAKE_BINARY_DIR}/debian/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME}
          COMPONENT ${component})
endforeach()

include(CPack)
