# SPDX-License-Identifier: MIT
# gateway.cmake - the gateway's balancer-mode decisions in libnres
# (runtime/include/nres/gateway.h), shared by the Lua balancer
# (lua/nres/ngx/balancer.lua registers its upstreams) and the nginx module
# (runtime/src/ngx), which is built here when nginx-dev is installed.
target_sources(nres_objects PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/registry.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/members.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/pick.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/request.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/limit.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/hist.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/control.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/lease.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/criticality.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/deadline.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/refusal.c
  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/gateway/key.c)
nres_add_c_test(gateway 60 core)
nres_add_c_test(members 60 core,threads)
include(${CMAKE_CURRENT_SOURCE_DIR}/runtime/src/ngx/ngx.cmake)
