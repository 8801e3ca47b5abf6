# SPDX-License-Identifier: MIT
# ngx.cmake - ngx_http_nres_module.so, the gateway's balancer mode as an
# nginx module (runtime/src/ngx), built when Debian's nginx-dev is
# installed (nginx's headers and configure in /usr/share/nginx/src) and
# not under sanitizers (nginx would need their runtimes preloaded). nginx's
# configure runs once into build/ngx (configure.sh); a rebuild is `make
# modules` there (one file). The module links build/libnres.so (rpath),
# the library nres.cdef loads through NRES_LIB in the tests, so the
# module and the Lua declarations share one registry.
#
# Installed (component ngx, the package libnginx-mod-http-nres) into
# NRES_INSTALL_NGXMODULEDIR, Debian nginx's module directory under the
# prefix (nginx's `load_module modules/...;` names /usr/lib/nginx/modules),
# with its rpath changed to the installed libnres: $ORIGIN-relative, so a
# prefix chosen at install time (--prefix, a package) still finds it. The
# build's rpath is padded ("/." repeated) to at least the installed one's
# length: file(RPATH_CHANGE) rewrites it in place.
set(NRES_NGINX_SRC /usr/share/nginx/src CACHE PATH "nginx source tree with conf_flags (nginx-dev)")
if(NRES_SANITIZE STREQUAL "" AND EXISTS ${NRES_NGINX_SRC}/configure
   AND EXISTS ${NRES_NGINX_SRC}/conf_flags)
  set(ngx_dir ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/ngx)
  set(ngx_tree ${CMAKE_BINARY_DIR}/ngx)
  set(ngx_module ${CMAKE_BINARY_DIR}/ngx_http_nres_module.so)
  set(NRES_INSTALL_NGXMODULEDIR "lib/nginx/modules" CACHE STRING
      "nginx module directory (relative to the install prefix, or absolute)")
  # Both relative to the prefix: $ORIGIN/<from the modules to the library>;
  # otherwise the library's directory as configured.
  if(IS_ABSOLUTE "${NRES_INSTALL_NGXMODULEDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(ngx_install_rpath "${CMAKE_INSTALL_FULL_LIBDIR}")
  else()
    file(RELATIVE_PATH ngx_to_lib "/p/${NRES_INSTALL_NGXMODULEDIR}" "/p/${CMAKE_INSTALL_LIBDIR}")
    string(REGEX REPLACE "/$" "" ngx_to_lib "${ngx_to_lib}")
    set(ngx_install_rpath "$ORIGIN/${ngx_to_lib}")
  endif()
  set(ngx_build_rpath "${CMAKE_BINARY_DIR}")
  string(LENGTH "${ngx_install_rpath}" ngx_want)
  string(LENGTH "${ngx_build_rpath}" ngx_have)
  while(ngx_have LESS ngx_want)
    string(APPEND ngx_build_rpath "/.")
    string(LENGTH "${ngx_build_rpath}" ngx_have)
  endwhile()
  # The rpath is configure's argument: a stamp that changes with it (and
  # only then) configures again, so an install rpath made longer by a new
  # prefix cannot leave an older, shorter one for RPATH_CHANGE to miss.
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/ngx-rpath.stamp CONTENT "${ngx_build_rpath}\n")
  add_custom_command(OUTPUT ${ngx_tree}/objs/Makefile
    COMMAND bash ${ngx_dir}/configure.sh ${NRES_NGINX_SRC} ${ngx_tree}
            "${CMAKE_CURRENT_SOURCE_DIR}/runtime/include ${CMAKE_BINARY_DIR}/include"
            ${CMAKE_BINARY_DIR} ${ngx_build_rpath}
    DEPENDS ${ngx_dir}/config ${ngx_dir}/configure.sh ${NRES_NGINX_SRC}/conf_flags
            ${CMAKE_BINARY_DIR}/ngx-rpath.stamp
    COMMENT "Configuring nginx for ngx_http_nres_module (once)")
  add_custom_command(OUTPUT ${ngx_module}
    COMMAND ${CMAKE_COMMAND} -E env MAKEFLAGS= make -s -f objs/Makefile modules
    COMMAND ${CMAKE_COMMAND} -E copy objs/ngx_http_nres_module.so ${ngx_module}
    WORKING_DIRECTORY ${ngx_tree}
    DEPENDS ${ngx_tree}/objs/Makefile ${ngx_dir}/ngx_http_nres_module.c
            ${ngx_dir}/ngx_http_nres_control_module.c
            ${CMAKE_CURRENT_SOURCE_DIR}/runtime/include/nres/gateway.h
            ${CMAKE_CURRENT_SOURCE_DIR}/runtime/include/nres.h
            ${CMAKE_BINARY_DIR}/include/nres/version.h nres
    COMMENT "Building ngx_http_nres_module.so")
  add_custom_target(nres_ngx_module ALL DEPENDS ${ngx_module})
  set(NRES_NGX_MODULE ${ngx_module})

  install(FILES ${ngx_module} DESTINATION ${NRES_INSTALL_NGXMODULEDIR} COMPONENT ngx)
  if(IS_ABSOLUTE "${NRES_INSTALL_NGXMODULEDIR}")
    set(ngx_installed "${NRES_INSTALL_NGXMODULEDIR}/ngx_http_nres_module.so")
  else()
    set(ngx_installed "\${CMAKE_INSTALL_PREFIX}/${NRES_INSTALL_NGXMODULEDIR}/ngx_http_nres_module.so")
  endif()
  install(CODE "file(RPATH_CHANGE FILE \"\$ENV{DESTDIR}${ngx_installed}\"
                     OLD_RPATH \"${ngx_build_rpath}\" NEW_RPATH \"${ngx_install_rpath}\")"
          COMPONENT ngx)
  # Installed as a file, the module is not stripped by `cmake --install
  # --strip` (CPack's CPACK_STRIP_FILES): strip it here, as Debian wants.
  install(CODE "if(CMAKE_INSTALL_DO_STRIP)
                  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-unneeded
                                  \"\$ENV{DESTDIR}${ngx_installed}\")
                endif()"
          COMPONENT ngx)
  # The Debian package's nginx ABI (nginx-dev's, e.g. nginx-abi-1.22.1-7),
  # which Debian's own module packages depend on.
  set(NRES_NGX_ABI "")
  if(EXISTS ${NRES_NGINX_SRC}/debian/libnginx-mod.abisubstvars)
    file(STRINGS ${NRES_NGINX_SRC}/debian/libnginx-mod.abisubstvars ngx_abi
         REGEX "^nginx:abi=")
    string(REGEX REPLACE "^nginx:abi=" "" NRES_NGX_ABI "${ngx_abi}")
  endif()
endif()

# nres_add_nginx_test(NAME SCRIPT TIMEOUT [ARGS...]): spec/nginx/SCRIPT.sh
# run with libnres and ARGS, alone (RUN_SERIAL: its bounds are on a real
# clock), labelled nginx.
function(nres_add_nginx_test name script timeout)
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/${script}.sh
                   $<TARGET_FILE:nres> ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} LABELS nginx RUN_SERIAL ON)
endfunction()

# spec/nginx/cbalancer.sh: the module in a real nginx (like nginx_balancer
# for the Lua balancer: run alone, RUN_SERIAL).
if(NRES_TESTS AND DEFINED NRES_NGX_MODULE)
  nres_add_nginx_test(nginx_cbalancer cbalancer 150 ${NRES_NGX_MODULE})
  # the control API through nres_control, beside the Lua handler
  nres_add_nginx_test(nginx_control control 60 ${NRES_NGX_MODULE})
  # weights and a backup peer through the module (spec/nginx/weights.sh)
  nres_add_nginx_test(nginx_cweights weights 150 ${NRES_NGX_MODULE})
  # peers added and removed at run time through the module (spec/nginx/members.sh)
  nres_add_nginx_test(nginx_cmembers members 120 ${NRES_NGX_MODULE})
  # spec/nginx/leases.sh: probe permits whose holder never reports (a
  # worker killed with -9, an error_page without gw.log) lapse (issue 28).
  nres_add_nginx_test(nginx_leases leases 120 ${NRES_NGX_MODULE})
  # spec/nginx/closed-loop.sh: bench/gateway/closed-loop.sh's plumbing,
  # --quick (record, nresrun tune, the gateway's JSON try log; ~20 s).
  if(NRES_SANITIZE STREQUAL "")
    nres_add_nginx_test(nginx_closed_loop closed-loop 90)
  endif()
endif()

# spec/nginx/signals.sh: nginx -t and nginx -s reload|reopen|quit|stop as
# systemd runs them; spec/nginx/defects.sh: issue 28's gateway defects
# (client aborts, long X-Deadline-Ms, HTTP/0.9 answers, IPv6 peers,
# balancing methods); spec/nginx/health.sh: active health checks (issue
# 25); spec/nginx/migrate.sh: a reload with another layout keeps the
# state (issue 25). Each with the Lua balancer and, when built, the module.
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  set(nres_ngx_test_module "")
  if(DEFINED NRES_NGX_MODULE)
    set(nres_ngx_test_module ${NRES_NGX_MODULE})
  endif()
  foreach(script signals defects health migrate)
    nres_add_nginx_test(nginx_${script} ${script} 120 ${nres_ngx_test_module})
  endforeach()
endif()

# spec/nginx/dns.sh: peers by name, re-resolved through a dnsmasq on a
# loopback port while requests run (issue 25); the Lua balancer and, when
# built, the module.
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  nres_add_nginx_test(nginx_dns dns 90)
  if(DEFINED NRES_NGX_MODULE)   # the same through the module
    nres_add_nginx_test(nginx_cdns dns 90 ${NRES_NGX_MODULE})
  endif()
endif()

# spec/nginx/regions.sh: region files that trust nothing (another user's,
# open to others, a link, a full filesystem, a truncation), in the Lua
# balancer and, when built, the module. Root only (tmpfs mounts): skipped
# otherwise.
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "")
  add_test(NAME nginx_regions
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/regions.sh
                   $<TARGET_FILE:nres> "${NRES_NGX_MODULE}")
  set_tests_properties(nginx_regions PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
endif()

# spec/nginx/findlib.sh: docs/gateway-regions.md's nginx blocks start as
# written, with no NRES_LIB (issue 26, finding the library).
if(NRES_TESTS AND NRES_SANITIZE STREQUAL "" AND TARGET nres-depserver)
  add_test(NAME nginx_findlib
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/findlib.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(nginx_findlib PROPERTIES TIMEOUT 60 LABELS nginx RUN_SERIAL ON)
endif()
