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
-- bind() runs in the first request phase (resty.core is loaded by then;
-- this module loads outside nginx too, for the specs).
local ffi = require "ffi"

local C = ffi.C
local ffi_new = ffi.new

local _M = {
  NGX_OK = 0, NGX_DECLINED = -5,
  value_ptr = ffi_new("char *[1]"),   -- var_get's value
  size_ptr = ffi_new("size_t[1]"),    -- and its length
  errmsg = ffi_new("char *[1]"),
  int_out = ffi_new("int[1]"),        -- get_last_failure's status
  lowcase = ffi_new("char[64]"),      -- var_get's scratch for the name
  uintptr_t = ffi.typeof("uintptr_t"),
  -- get_last_failure's states (ngx.balancer's names)
  FAILURE = { [1] = "keepalive", [2] = "next", [4] = "failed" },
}

function _M.bind()
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
  return _M
end

return _M
