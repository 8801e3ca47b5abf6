-- SPDX-License-Identifier: MIT
-- nres.ngx.watch: every state change of a breaker (a scope's key's) or a
-- peer (its ejection breaker) as one error.log line - [warn] when it opens
-- or is ejected, with why and the counts; [notice] when it closes, is
-- restored, or probes (half-open). One worker (worker 0) looks every
-- second (gw.init_worker starts it), so each change is logged once for the
-- whole nginx, and nothing runs on a request; a look at breakers that did
-- not change makes no garbage. Rate-limited: at most one
-- line per breaker every `every` s (5) - the changes between are counted
-- in the next line - and at most `burst` (20) lines a look, the rest
-- counted in one line.
local ffi = require "ffi"
local cdef = require "nres.cdef"
local config = require "nres.ngx.config"
local keytext = require "nres.ngx.keytext"

local C = cdef.C
local tonumber, pairs, format = tonumber, pairs, string.format
local stats = ffi.new("nres_breaker_stats_t")
local counts = ffi.new("nres_shm_counts_t")

local _M = { every = 5, burst = 20, period = 1 }

local STATES = { [0] = "closed", "open", "half-open", "isolated" }
local STOP_OK = 1

-- What is known of each breaker, per upstream (by peer index) and per
-- scope (by slot): state code, trips, the slot's key generation, changes
-- not yet logged, when its last line was written (s). Numbers in flat
-- tables: a look at a breaker that did not change makes no garbage.
local function new_seen() return { state = {}, trips = {}, gen = {}, changes = {}, at = {} } end
local seen = {}   -- by the upstream's or scope's table (nres.ngx.config)

local gen_box = ffi.new("uint32_t[1]")
local key_buf = ffi.new("char[1]")

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

-- Breaker i of table `e` (seen[...]) looked at: true when a line is due.
-- gen: its slot's key generation (a new key starts fresh).
local function changed(e, i, breaker, gen, now, t)
  local state = C.nres_breaker_state(breaker, now)
  C.nres_breaker_stats(breaker, stats)
  local trips = tonumber(stats.trips)
  if e.gen[i] ~= gen then   -- first look (start, reload, a new key): no line if closed
    e.gen[i], e.state[i], e.trips[i], e.at[i] = gen, state, trips, -1 / 0
    e.changes[i] = state ~= 0 and 1 or 0
  elseif state ~= e.state[i] or trips ~= e.trips[i] then
    -- reopened between two looks (open -> half-open -> open): one more
    -- change per trip
    e.changes[i] = e.changes[i] + math.max(state ~= e.state[i] and 1 or 0, trips - e.trips[i])
    e.state[i], e.trips[i] = state, trips
  end
  return e.changes[i] > 0 and t - e.at[i] >= _M.every
end

-- The line of breaker i of e (changed said one is due): level, text. by:
-- who isolated it, if not the control API.
local function describe(e, i, what, kind, slot, t, by)
  C.nres_shm_slot_counts(slot, counts)
  local tries = tonumber(counts.calls)
  local level, text = line(what, kind, {
    state = STATES[e.state[i]] or "closed", trips = e.trips[i], by = by,
    consecutive = tonumber(stats.consecutive),
    tries = tries, failures = tries - tonumber(counts.stops[STOP_OK]) }, e.changes[i])
  e.changes[i], e.at[i] = 0, t
  return level, text
end

-- One look at every breaker: calls log(level, text) per line ("warn" or
-- "notice"). t: a clock in s (the rate limit's).
function _M.poll(log, now, t)
  local n, dropped = 0, 0
  local function emit(level, text)
    if n < _M.burst then
      n = n + 1
      log(level, text)
    else
      dropped = dropped + 1
    end
  end
  for name, u in pairs(config.upstreams) do
    if u.balancer then
      require("nres.ngx.balancer").sync(u)   -- peers another worker added or removed
      local e = seen[u]
      if e == nil then e = new_seen(); seen[u] = e end
      for i = 1, u.n do   -- members only, each known by its slot
        local k = u.idx[i] + 1
        if u.live[i] and changed(e, k, u.br[i], 0, now, t) then
          emit(describe(e, k, u.peer[i] .. " of upstream " .. name, "peer",
                        C.nres_shm_slot(u.ptr, u.idx[i]), t,
                        require("nres.ngx.health").held(u, i) and "the health checks" or nil))
        end
      end
    end
  end
  for name, s in pairs(config.scopes) do
    if s.breaker then
      local e = seen[s]
      if e == nil then e = new_seen(); seen[s] = e end
      for i = 0, s.shm.slots - 1 do
        if C.nres_shm_key(s.ptr, i, key_buf, 0, gen_box, nil) >= 0 then
          local slot = C.nres_shm_slot(s.ptr, i)
          if changed(e, i, slot.breaker, tonumber(gen_box[0]), now, t) then
            emit(describe(e, i, format('"%s" of scope %s', keytext.key(s.shm:key(i) or ""),
                                       name), "key", slot, t))
          end
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
