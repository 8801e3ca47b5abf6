-- SPDX-License-Identifier: MIT
-- nres-0.3.0-1.rockspec - the LuaRocks package of nres: `luarocks make` in
-- a checkout builds libnres with CMake (only the library: no tests, no
-- benchmarks, no nresrun executable) and installs the Lua modules, the
-- library's face (require "nres", presets in nres/policies) and the
-- harness's (require "nresrun"), with libnres.so in the tree's C module
-- directory, where nres.cdef finds it through package.cpath (no NRES_LIB).
-- Needs cmake, a C compiler, libuv1-dev and libhttp-parser-dev.
-- The version is CMake's project version (spec/install/version.sh checks).
rockspec_format = "3.0"
package = "nres"
version = "0.3.0-1"
source = {
  -- The release tarball made from the tree, read from /tmp so that
  -- `luarocks pack` and `luarocks build` work offline on any machine:
  --   git archive --prefix=nres-0.3.0/ -o /tmp/nres-0.3.0.tar.gz HEAD
  --   luarocks pack nres-0.3.0-1.rockspec     # nres-0.3.0-1.src.rock
  -- Once the tarball is published, its https URL replaces this one.
  -- `luarocks make` in a checkout builds the checkout and ignores it.
  url = "file:///tmp/nres-0.3.0.tar.gz",
  dir = "nres-0.3.0",
}
description = {
  summary = "Resilience policies for LuaJIT and OpenResty on a C11 runtime",
  license = "MIT",
  detailed = [[
Retries with backoff and jitter, deadlines and attempt timeouts,
classifiers, retry budgets, circuit breakers, rate and concurrency
limits, hedging, fallback and telemetry, decided by libnres (C11, no
allocation on any call path) and used from LuaJIT through the FFI.
]],
}
-- LuaJIT, not any Lua 5.1: nres needs its FFI. Debian's LuaRocks runs
-- plain Lua 5.1, where a "luajit" dependency could not be met, so the
-- check is at load: under another Lua, require "nres" fails saying it
-- needs LuaJIT (lua/nres/cdef.lua; spec/install/rock.sh checks it).
dependencies = {
  "lua >= 5.1, < 5.2",
}
external_dependencies = {
  LIBUV = { header = "uv.h" },
  HTTP_PARSER = { header = "http_parser.h" },
}
build = {
  type = "command",
  build_command = [[
cmake -S . -B build-rock -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNRES_TESTS=OFF -DNRES_BENCH=OFF "-DNRES_COMPONENTS=pool;http;shm" \
  -DNRES_INSTALL_DOCS=OFF \
  "-DNRES_INSTALL_LUADIR=$(LUADIR)" &&
cmake --build build-rock --target nres -j `nproc 2>/dev/null || echo 2`
]],
  install_command = [[
cmake --install build-rock --component lua &&
cmake --install build-rock --component nresrun
]],
  install = {
    lib = { libnres = "build-rock/libnres.so" },
  },
}
