# SPDX-License-Identifier: MIT
# install.cmake - the install tests (label install), included by
# CMakeLists.txt with NRES_TESTS: the installed library used from C
# (gcc and clang, shared and static, through pkg-config), the LuaRocks
# rock (luarocks make into a temporary tree, then require "nres" with no
# NRES_LIB), the Debian packages (cpack, unpacked with dpkg-deb -x), and
# the nginx module (installed, then loaded by nginx). Each works in a
# temporary directory and touches nothing else.
if(NOT NRES_SANITIZE STREQUAL "")
  return()   # installed artefacts are built without sanitizers
endif()

add_test(NAME install_consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/consumer.sh
                 ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
set_tests_properties(install_consumer PROPERTIES TIMEOUT 120 LABELS install)

add_test(NAME install_version
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/version.sh
                 ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
set_tests_properties(install_version PROPERTIES TIMEOUT 30 LABELS install)

# README.md's C quick start from a prefix install, as written.
add_test(NAME install_quickstart
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/quickstart.sh ${CMAKE_BINARY_DIR})
set_tests_properties(install_quickstart PROPERTIES TIMEOUT 120 LABELS install)

# The manual pages: installed, made from --help, rendered by man.
add_test(NAME install_man
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/man.sh ${CMAKE_BINARY_DIR})
set_tests_properties(install_man PROPERTIES TIMEOUT 120 LABELS install)

add_test(NAME install_rock
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/rock.sh ${PROJECT_VERSION})
set_tests_properties(install_rock PROPERTIES TIMEOUT 300 LABELS install)

add_test(NAME install_deb
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/deb.sh
                 ${CMAKE_BINARY_DIR} ${PROJECT_VERSION} ${PROJECT_VERSION_MAJOR})
# cpack builds the tree first (its preinstall step): quick on a built tree,
# minutes if sources changed since.
set_tests_properties(install_deb PROPERTIES TIMEOUT 600 LABELS install)

# The nginx module, when built: installed where nginx's modules go, finding
# the installed libnres, loaded by nginx (also run by `ctest -R nginx`).
if(DEFINED NRES_NGX_MODULE)
  add_test(NAME nginx_install
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spec/install/ngx.sh
                   ${CMAKE_BINARY_DIR} ${NRES_INSTALL_NGXMODULEDIR})
  set_tests_properties(nginx_install PROPERTIES TIMEOUT 120 LABELS "install;nginx")
endif()
