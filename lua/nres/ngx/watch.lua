-- nres.ngx.watch: every state change of a breaker (a scope's key's) or a
-- peer (its ejection breaker) as one error.log line - [warn] when it opens
-- or is ejected, with why and the counts; [notice] when it closes, is
-- restored, or probes (half-open). One worker (worker 0) looks every
-- 0.5 s (gw.init_worker starts it), so each change is logged once for the
-- whole nginx, and nothing runs on a request. Rate-limited: at most one
-- line per breaker every `every` s (5) - the changes between are counted
-- in the next line - and at most `burst` (20) lines a look, the rest
-- counted in one line.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"
local keytext = require "nres.ngx.keytext"

local C = cdef.C
local tonumber, tostring, pairs, format = tonumber, tostring, pairs, string.format
local stats = ffi.new("nres_breaker_stats_t")
local counts = ffi.new("nres_shm_counts_t")

local _M = { every = 5, burst = 20, period = 0.5 }

local STATES = { [0] = "closed", "open", "half-open", "isolated" }
local STOP_OK = 1

-- What is known of each breaker (by its name): state, trips, changes not
-- yet logged, when its last line was written (s).
local seen = {}

-- The line for breaker `what` now in state `st` (a table of its figures).
local function line(what, kind, st, changes)
  local more = changes > 1 and format(" (%d changes since the last line)", changes) or ""
  local counts_text = format("%d tries, %d failed; opened %d times", st.tries, st.failures,
                             st.trips)
  if st.state == "open" then
    local why = st.consecutive > 0 and format("%d failures in a row", st.consecutive)
                or "too many failures in its window"
    return "warn", format("nres: %s %s %s: %s; %s%s", kind, what,
                          kind == "peer" and "ejected" or "breaker opened", why, counts_text, more)
  elseif st.state == "isolated" then
    return "warn", format("nres: %s %s %s by %s; %s%s", kind, what,
                          kind == "peer" and "ejected" or "breaker isolated",
                          st.by or "the control API", counts_text, more)
  elseif st.state == "half-open" then
    return "notice", format("nres: %s %s probing (half-open); %s%s", kind, what, counts_text, more)
  end
  return "notice", format("nres: %s %s %s; %s%s", kind, what,
                          kind == "peer" and "restored" or "breaker closed", counts_text, more)
end

-- One breaker looked at: a line to write (level, text), or nil.
local function look(key, what, kind, breaker, slot, now, t, by)
  local state = STATES[C.nres_breaker_state(breaker, now)] or "closed"
  C.nres_breaker_stats(breaker, stats)
  local trips = tonumber(stats.trips)
  local e = seen[key]
  if e == nil then   -- first look (start, reload): no line for a closed one
    e = { state = "closed", trips = trips, changes = 0, at = -1 / 0 }
    seen[key] = e
    if state == "closed" then return nil end
    e.changes = 1
  elseif state ~= e.state or trips ~= e.trips then
    -- reopened between two looks (open -> half-open -> open): one more
    -- change per trip
    e.changes = e.changes + math.max(state ~= e.state and 1 or 0, trips - e.trips)
  end
  e.state, e.trips = state, trips
  if e.changes == 0 or t - e.at < _M.every then return nil end
  C.nres_shm_slot_counts(slot, counts)
  local tries = tonumber(counts.calls)
  local level, text = line(what, kind, {
    state = state, trips = trips, by = by, consecutive = tonumber(stats.consecutive),
    tries = tries, failures = tries - tonumber(counts.stops[STOP_OK]) }, e.changes)
  e.changes, e.at = 0, t
  return level, text
end

-- One look at every breaker: calls log(level, text) per line ("warn" or
-- "notice"). t: a clock in s (the rate limit's).
function _M.poll(log, now, t)
  local n, dropped = 0, 0
  local function emit(level, text)
    if not level then return end
    if n < _M.burst then
      n = n + 1
      log(level, text)
    else
      dropped = dropped + 1
    end
  end
  for name, u in pairs(config.upstreams) do
    if u.balancer then
      for i = 1, u.n do
        local slot = C.nres_shm_slot(u.ptr, u.idx[i])
        emit(look("peer\0" .. name .. "\0" .. u.peer[i], u.peer[i] .. " of upstream " .. name,
                  "peer", u.br[i], slot, now, t, require("nres.ngx.health").held(u, i)
                  and "the health checks" or nil))
      end
    end
  end
  for name, s in pairs(config.scopes) do
    if s.breaker then
      for i = 0, s.shm.slots - 1 do
        local key, gen = s.shm:key(i)
        if key then
          local slot = s.shm:slot(i)
          emit(look("scope\0" .. name .. "\0" .. i .. "\0" .. tostring(gen),
                    format('"%s" of scope %s', keytext.key(key), name), "key", slot.breaker,
                    slot, now, t))
        end
      end
    end
  end
  if dropped > 0 then
    log("warn", format("nres: %d more breaker state changes not logged this time (rate limit)",
                       dropped))
  end
end

-- Forget what was seen (tests).
function _M.reset() seen = {} end

-- gw.init_worker(): worker 0 looks every `period` s.
function _M.start()
  if not ngx or (ngx.worker.id() or 0) ~= 0 then return end
  local levels = { warn = ngx.WARN, notice = ngx.NOTICE }
  local function log(level, text) ngx.log(levels[level], text) end
  local ok, err = ngx.timer.every(_M.period, function(premature)
    if premature then return end
    local fine, why = pcall(_M.poll, log, C.nres_step_now(), ngx.now())
    if not fine then ngx.log(ngx.ERR, "nres: watching breakers: ", why) end
  end)
  if not ok then ngx.log(ngx.ERR, "nres: cannot watch breakers: ", err) end
end

return _M
