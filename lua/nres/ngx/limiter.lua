-- nres.ngx.limiter: admissions from a shared per-key rate limiter (e.g.
-- one per client address) and the access-phase helper answering 429.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"

local C = cdef.C
local ffi_new = ffi.new
local error, ceil = error, math.ceil
local step_now = C.nres_step_now
local sh_acquire, sh_limit = C.nres_shm_acquire, C.nres_shm_limit
local bad, limiters = config.bad, config.limiters

local _M = {}

local gen_box = ffi_new("uint32_t[1]")
local wait_box = ffi_new("double[1]")

-- ------------------------------------------------------------- limits

-- One admission for `key` (e.g. the client address) from limiter `name`:
-- true, or false and the seconds until one would be allowed. A full table
-- admits (and counts the overflow): the limiter never fails closed. An
-- empty key (a header the client did not send) is not limited, as
-- nginx's limit_req does not account it, and is no overflow. A key
-- longer than a slot's 64 bytes is limited under its MD5.
function _M.limit(name, key)
  local s = limiters[name]
  if s == nil then error(bad("limit", "limiter", "a limiter declared with gw.limiter", name), 2) end
  if type(key) ~= "string" then error(bad("limit", "key", "a string", key), 2) end
  if #key > 64 then key = ngx.md5(key) elseif key == "" then return true end
  local now = step_now()
  local idx = sh_acquire(s.ptr, key, #key, now, s.hold, gen_box)
  if idx < 0 then
    s.overflow = s.overflow + 1
    return true
  end
  if sh_limit(s.ptr, idx, now, wait_box) == 0 then return true end
  return false, wait_box[0] / 1e9
end

-- Access-phase helper: 429 with Retry-After (whole seconds, at least 1)
-- when `key` is over its rate.
function _M.limit_client(name, key)
  local ok, wait = _M.limit(name, key)
  if ok then return true end
  ngx.header["Retry-After"] = ceil(wait) > 0 and ceil(wait) or 1
  ngx.header["X-Nres-Reason"] = "rate limited"
  return ngx.exit(429)
end

return _M
