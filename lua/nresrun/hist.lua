-- SPDX-License-Identifier: MIT
-- nresrun.hist: latency histograms on the runtime's log-linear buckets.
--
-- nresrun's cells and the simulator count latencies in the same buckets as
-- the C estimator (nres_hist_index: 16 per power of two, at most 6.25 %
-- relative error), in an FFI array, so recording allocates nothing.
local ffi = require "ffi"
local C = require("nres.cdef").C

local _M = { _VERSION = "0.1.0", BUCKETS = 608 }

local BUCKETS = _M.BUCKETS

function _M.new() return ffi.new("uint32_t[?]", BUCKETS) end

_M.index = C.nres_hist_index

-- The q-quantile in ns (the bucket's upper bound) of `total` samples, or
-- nil when there are none.
function _M.quantile(hist, total, q)
  if total == 0 then return nil end
  local rank = math.max(1, math.ceil(q * total))
  local seen = 0
  for i = 0, BUCKETS - 1 do
    seen = seen + hist[i]
    if seen >= rank then return tonumber(C.nres_hist_upper(i)) end
  end
  return tonumber(C.nres_hist_upper(BUCKETS - 1))
end

return _M
