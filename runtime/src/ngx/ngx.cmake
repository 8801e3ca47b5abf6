# ngx.cmake - ngx_http_nres_module.so, the gateway's balancer mode as an
# nginx module (runtime/src/ngx), built when Debian's nginx-dev is
# installed (nginx's headers and configure in /usr/share/nginx/src) and
# not under sanitizers (nginx would need their runtimes preloaded). nginx's
# configure runs once into build/ngx (configure.sh); a rebuild is `make
# modules` there (one file). The module links build/libnres.so (rpath),
# the library nres.cdef loads through NRES_LIB in the tests, so the
# module and the Lua declarations share one registry.
set(NRES_NGINX_SRC /usr/share/nginx/src CACHE PATH "nginx source tree with conf_flags (nginx-dev)")
if(NRES_SANITIZE STREQUAL "" AND EXISTS ${NRES_NGINX_SRC}/configure
   AND EXISTS ${NRES_NGINX_SRC}/conf_flags)
  set(ngx_dir ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/ngx)
  set(ngx_tree ${CMAKE_BINARY_DIR}/ngx)
  set(ngx_module ${CMAKE_BINARY_DIR}/ngx_http_nres_module.so)
  add_custom_command(OUTPUT ${ngx_tree}/objs/Makefile
    COMMAND bash ${ngx_dir}/configure.sh ${NRES_NGINX_SRC} ${ngx_tree}
            "${CMAKE_CURRENT_SOURCE_DIR}/runtime/include ${CMAKE_BINARY_DIR}/include"
            ${CMAKE_BINARY_DIR}
    DEPENDS ${ngx_dir}/config ${ngx_dir}/configure.sh ${NRES_NGINX_SRC}/conf_flags
    COMMENT "Configuring nginx for ngx_http_nres_module (once)")
  add_custom_command(OUTPUT ${ngx_module}
    COMMAND ${CMAKE_COMMAND} -E env MAKEFLAGS= make -s -f objs/Makefile modules
    COMMAND ${CMAKE_COMMAND} -E copy objs/ngx_http_nres_module.so ${ngx_module}
    WORKING_DIRECTORY ${ngx_tree}
    DEPENDS ${ngx_tree}/objs/Makefile ${ngx_dir}/ngx_http_nres_module.c
            ${CMAKE_CURRENT_SOURCE_DIR}/runtime/include/nres/gateway.h
            ${CMAKE_CURRENT_SOURCE_DIR}/runtime/include/nres.h nres
    COMMENT "Building ngx_http_nres_module.so")
  add_custom_target(nres_ngx_module ALL DEPENDS ${ngx_module})
  set(NRES_NGX_MODULE ${ngx_module})
endif()

# spec/nginx/cbalancer.sh: the module in a real nginx (like nginx_balancer
# for the Lua balancer: run alone, RUN_SERIAL).
if(NRES_TESTS AND DEFINED NRES_NGX_MODULE)
  add_test(NAME nginx_cbalancer
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/nginx/cbalancer.sh
                   $<TARGET_FILE:nres> ${NRES_NGX_MODULE})
  set_tests_properties(nginx_cbalancer PROPERTIES TIMEOUT 150 LABELS nginx RUN_SERIAL ON)
endif()
