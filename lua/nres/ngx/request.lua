-- SPDX-License-Identifier: MIT
-- nres.ngx.request: the lua-nginx-module C functions balancer mode calls
-- on every request, bound for direct FFI calls (the ones resty.core's
-- wrappers call, with resty.core's own cdefs: this module only binds them,
-- so a module of another ABI fails loudly on the first call, never
-- silently), and the buffers they write to.
--
-- Why not the wrappers (ngx.var, ngx.req.set_header, ngx.status,
-- ngx.balancer): each starts with resty.core's get_request(), which LuaJIT
-- compiles as a trace of its own; a trace being recorded that calls such a
-- function stops there and links to it, and when that trace returns, the
-- rest of the caller runs in the interpreter, where every FFI call costs
-- hundreds of instructions. Here the request is thread.exdata() (a builtin
-- the compiler inlines) and nres.ngx.balancer makes the calls in its phase
-- functions themselves, so each phase compiles into one trace.
--
-- One of them changed its arguments: lua-nginx-module 0.10.27 (and
-- lua-resty-core 0.1.29, which declares it) added `host, host_len` to
-- ngx_http_lua_ffi_balancer_set_current_peer, and LuaJIT refuses a call
-- with too few. The signature is chosen from ngx.config.ngx_lua_version
-- (peer_host_args), as lua-resty-core's base.lua pins it: when a balancer
-- upstream is declared (init_by_lua: an unsupported version fails the
-- start) and when binding (gw.init_worker), never on a request.
--
-- bind() runs in init_worker (gw.init_worker), or else in the first
-- request phase (resty.core is loaded by then; this module loads outside
-- nginx too, for the specs).
local ffi = require "ffi"

local C = ffi.C
local ffi_new = ffi.new
local type, tostring, format = type, tostring, string.format

-- lua-nginx-module versions (ngx_lua_version: 0.10.23 is 10023)
local OLDEST = 10023      -- the oldest this binding was tested with
local HOST_ARGS = 10027   -- set_current_peer takes host, host_len from here

local _M = {
  NGX_OK = 0, NGX_DECLINED = -5,
  value_ptr = ffi_new("char *[1]"),   -- var_get's value
  size_ptr = ffi_new("size_t[1]"),    -- and its length
  errmsg = ffi_new("char *[1]"),
  int_out = ffi_new("int[1]"),        -- get_last_failure's status
  truncated = ffi_new("int[1]"),      -- get_headers_count's
  HEADERS_MAX = 100,                  -- headers listed at most (ngx.req.get_headers')
  lowcase = ffi_new("char[64]"),      -- var_get's scratch for the name
  uintptr_t = ffi.typeof("uintptr_t"),
  -- get_last_failure's states (ngx.balancer's names)
  FAILURE = { [1] = "keepalive", [2] = "next", [4] = "failed" },
}

-- Does set_current_peer of lua-nginx-module `version` (ngx_lua_version)
-- take host and host_len (7 arguments) or not (5)? true or false; nil and
-- the reason for a version this binding does not support.
function _M.peer_host_args(version)
  if type(version) ~= "number" or version % 1 ~= 0 then
    return nil, "ngx.config.ngx_lua_version: expected lua-nginx-module's version number"
      .. " (0.10.23 or newer), got " .. tostring(version)
  end
  if version < OLDEST then
    return nil, format("expected lua-nginx-module 0.10.23 or newer (ngx_lua_version %d),"
      .. " got %d", OLDEST, version)
  end
  return version >= HOST_ARGS
end

-- The binding for lua-nginx-module `version` (default: the running one's,
-- ngx.config.ngx_lua_version); an unsupported version is an error naming
-- it. peer_host: set_peer takes (r, addr, len, port, host, host_len, err)
-- rather than (r, addr, len, port, err).
function _M.bind(version)
  local host, why = _M.peer_host_args(version or ngx.config.ngx_lua_version)
  if host == nil then error("nres.ngx: balancer mode: " .. why, 0) end
  _M.peer_host = host
  require "nres.cdef.gateway"   -- nres_gw_header_t
  require "resty.core.var"
  require "resty.core.request"
  require "resty.core.misc"
  require "ngx.balancer"
  _M.exdata = require "thread.exdata"      -- the current request
  _M.var_get = C.ngx_http_lua_ffi_var_get
  _M.set_header = C.ngx_http_lua_ffi_req_set_header
  _M.status = C.ngx_http_lua_ffi_get_resp_status
  _M.start_time = C.ngx_http_lua_ffi_req_start_time
  _M.set_peer = C.ngx_http_lua_ffi_balancer_set_current_peer
  _M.set_more_tries = C.ngx_http_lua_ffi_balancer_set_more_tries
  _M.set_timeouts = C.ngx_http_lua_ffi_balancer_set_timeouts
  _M.last_failure = C.ngx_http_lua_ffi_balancer_get_last_failure
  -- the request's headers listed in place (nres_gw_header_t has the layout
  -- of lua-nginx-module's ngx_http_lua_ffi_table_elt_t: checked here)
  _M.headers_count = C.ngx_http_lua_ffi_req_get_headers_count
  _M.get_headers = C.ngx_http_lua_ffi_req_get_headers
  local elt = "ngx_http_lua_ffi_table_elt_t"
  if ffi.sizeof(elt) ~= ffi.sizeof("nres_gw_header_t")
     or ffi.offsetof(elt, "value") ~= ffi.offsetof("nres_gw_header_t", "value_len") then
    error("nres.ngx: balancer mode: expected lua-nginx-module's " .. elt .. " laid out as"
          .. " nres_gw_header_t, got another layout", 0)
  end
  _M.headers = ffi_new("nres_gw_header_t[?]", _M.HEADERS_MAX)
  _M.headers_out = ffi.cast(elt .. " *", _M.headers)   -- _M.headers keeps it alive
  return _M
end

return _M
