-- SPDX-License-Identifier: MIT
-- nres.sync: fleet sync through Redis from Lua (runtime/include/nres/sync.h).
--
--   local sync = require "nres.sync"
--   local agent = assert(sync.new{ fleet = "prod", redis = "127.0.0.1:6379", interval = 0.1 })
--   agent:add("api", p)                     -- p's budget and rate limiter
--   agent:add("api", p, { breaker = true }) -- and its breaker (opt-in)
--   agent:start()                           -- a thread of the agent's own
--   p:stats().fleet -- the same view, for p's entries only
--   agent:stats()   -- { connected, rounds, failures, connects, errors, error, node, last_sync_age,
--                   --   entries = { { scope, kind, synced, hosts, fleet,
--                   --                 ["local"], demand, prober, rounds } } }
--   sync.status("/dev/shm/gw.sync.json")   -- nres-syncd's --status file
--
-- The agent is C (libnres_sync, beside libnres: $NRES_SYNC_LIB, or the
-- directory libnres was loaded from, or package.cpath): it runs on its own
-- thread and never calls Lua, so it works under plain LuaJIT and nresrun
-- alike. In nginx, run nres-syncd next to the gateway instead (workers
-- must not start threads); sync.status reads what it publishes.
--
-- The state synced is C state a policy points at (p.cp.budget, .ratelimit,
-- .breaker) or such a pointer itself; the agent keeps a reference to what
-- it was given, so it is not collected while synced. That state must live
-- on the monotonic clock (nres_step_now: the plain and nginx drivers).
local ffi = require "ffi"
local cdef = require "nres.cdef"
local unit_seconds = require("nres.schema").seconds

local type, error, tonumber, format, setmetatable = type, error, tonumber, string.format, setmetatable
local ffi_string, ffi_new, ffi_gc = ffi.string, ffi.new, ffi.gc

ffi.cdef [[
typedef struct nres_sync_s nres_sync_t;
typedef struct nres_sync_config_s {
  const char *host; int port; const char *prefix; const char *node;
  nres_time_t interval, timeout, reconnect_max, ttl;
  double local_share; uint64_t seed;
  const char *fleet, *unix_path, *user, *password, *password_file;
  int db; double breaker_quorum; nres_time_t probe_lease;
  const char *sentinels, *master, *cluster;
  int tls; const char *tls_ca_file, *tls_cert_file, *tls_key_file, *tls_server_name;
  void (*log)(void *arg, const char *line); void *log_arg;
  double breaker_fleet_ratio; uint32_t breaker_fleet_min_calls;
  const char *sentinel_user, *sentinel_password, *sentinel_password_file;
} nres_sync_config_t;
typedef struct nres_sync_info_s {
  uint32_t connected, entries; uint64_t rounds, failures, connects;
  nres_time_t last_sync, next_connect; uint64_t errors; char error[320];
} nres_sync_info_t;
typedef struct nres_sync_stats_s {
  char scope[128]; uint32_t kind, synced, hosts, prober;
  nres_time_t last_sync; double fleet, local, demand; uint64_t rounds, leases_expired;
} nres_sync_stats_t;
void nres_sync_config_init(nres_sync_config_t *config);
int nres_sync_new(const nres_sync_config_t *config, nres_sync_t **out);
void nres_sync_free(nres_sync_t *sync);
int nres_sync_add_budget(nres_sync_t *sync, const char *scope, nres_budget_t *budget, double fleet_floor);
int nres_sync_add_ratelimit(nres_sync_t *sync, const char *scope, nres_ratelimit_t *limit, double fleet_rate);
int nres_sync_add_ratelimit_burst(nres_sync_t *sync, const char *scope, nres_ratelimit_t *limit, double fleet_rate, uint32_t fleet_burst);
int nres_sync_add_breaker(nres_sync_t *sync, const char *scope, nres_breaker_t *breaker);
int nres_sync_remove(nres_sync_t *sync, int id);
int nres_sync_tick(nres_sync_t *sync, nres_time_t now);
int nres_sync_probe(nres_sync_t *sync, nres_time_t now);
int nres_sync_start(nres_sync_t *sync);
int nres_sync_stop(nres_sync_t *sync);
void nres_sync_info(nres_sync_t *sync, nres_sync_info_t *out);
int nres_sync_stats(nres_sync_t *sync, int id, nres_sync_stats_t *out);
const char *nres_sync_node(nres_sync_t *sync);
]]

local function load_library()
  local tried, list = {}, {}
  local env = os.getenv("NRES_SYNC_LIB")
  if env and env ~= "" then list[#list + 1] = env end
  local dir = cdef.path and cdef.path:match("^(.*)/[^/]*$")
  if dir then list[#list + 1] = dir .. "/libnres_sync.so" end
  for template in package.cpath:gmatch("[^;]+") do
    list[#list + 1] = (template:gsub("%?", "libnres_sync"))
  end
  for _, path in ipairs(list) do
    local ok, lib = pcall(ffi.load, path)
    if ok then return lib end
    tried[#tried + 1] = "  " .. path
  end
  return nil, "nres.sync: cannot load libnres_sync; tried:\n" .. table.concat(tried, "\n")
end

local S, load_err = load_library()

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

local kinds = { "budget", "ratelimit", "breaker" }

local function bad(n, fname, expected, got)
  return format("bad argument #%d to '%s' (%s expected, got %s)", n, fname, expected, type(got))
end

local function name_ok(v, max)
  return type(v) == "string" and #v >= 1 and #v <= max
end

-- sentinels = { "host:port", ... } or cluster = { ... }: 1..8 addresses,
-- as the C side takes them ("h:p,h:p"); raised at sync.new's caller.
local function addr_list(field, list)
  if type(list) ~= "table" or #list == 0 or #list > 8 then
    error(bad(1, "new", field .. ": a list of 1..8 \"host:port\"", list), 3)
  end
  for i, a in ipairs(list) do
    if type(a) ~= "string" or not a:match("^[^,]+:%d+$") then
      error(format("nres.sync: %s[%d]: expected \"host:port\", got %s", field, i, tostring(a)), 3)
    end
  end
  return table.concat(list, ",")
end

-- A user and a password of opts (prefix "" for Redis, "sentinel_" for the
-- Sentinels) into cfg: the password from a file (checked readable here,
-- read by C) or an environment variable, never inline.
local function credential(opts, cfg, keep, prefix)
  local user, file, env = opts[prefix .. "user"], opts[prefix .. "password_file"],
                          opts[prefix .. "password_env"]
  if user ~= nil then
    if not name_ok(user, 127) then
      error(bad(1, "new", prefix .. "user: a name of 1..127 bytes", user), 3)
    end
    keep[#keep + 1] = user
    cfg[prefix .. "user"] = keep[#keep]
  end
  if file ~= nil and env ~= nil then
    error(format("nres.sync: %spassword_file, %spassword_env: expected one of them, got both",
                 prefix, prefix), 3)
  end
  if file ~= nil then
    if not name_ok(file, 4096) then error(bad(1, "new", prefix .. "password_file: a path", file), 3) end
    local f, ferr = io.open(file, "r")
    if not f then
      error(format("nres.sync: %spassword_file: expected a readable file, got %s", prefix,
                   tostring(ferr)), 3)
    end
    f:close()
    keep[#keep + 1] = file
    cfg[prefix .. "password_file"] = keep[#keep]
  elseif env ~= nil then
    local v = type(env) == "string" and os.getenv(env)
    if not v or v == "" then
      error(format("nres.sync: %spassword_env: expected the name of a set environment variable, got %s",
                   prefix, tostring(env)), 3)
    end
    keep[#keep + 1] = v
    cfg[prefix .. "password"] = keep[#keep]
  end
  if user ~= nil and file == nil and env == nil then
    error(format("nres.sync: %suser: expected a password too (%spassword_file or %spassword_env)",
                 prefix, prefix, prefix), 3)
  end
end

-- sync.new{ fleet = name (required), redis = "host:port" | "unix:/path",
--           db = n, user = acl_user, password_file = path | password_env = VAR,
--           interval = s, timeout = s, reconnect_max = s, ttl = s,
--           prefix = "nres", node = name, local_share = 0..1,
--           breaker_quorum = 0..<1, probe_lease = s,
--           breaker_fleet_ratio = 0..1, breaker_fleet_min_calls = n,
--           sentinels = { "host:port", ... }, master = name,   -- instead of redis
--           sentinel_user = name, sentinel_password_file = path | sentinel_password_env = VAR,
--           cluster = { "host:port", ... },                    -- or a Cluster's seeds
--           tls = true | { ca_file =, cert_file =, key_file =, server_name = } }
-- Returns the agent, or nil and a reason (no library, refused settings).
-- A password is read from a file or an environment variable, never given
-- inline (it would sit in configuration text and process listings).
function _M.new(opts)
  if not S then return nil, load_err end
  opts = opts or {}
  if type(opts) ~= "table" then error(bad(1, "new", "table", opts), 2) end
  local cfg = ffi_new("nres_sync_config_t")
  S.nres_sync_config_init(cfg)
  local keep = {}   -- strings the config points at, alive with the agent
  if not (name_ok(opts.fleet, 64) and not opts.fleet:find("[%s{}:]")) then
    error("nres.sync: fleet: expected the fleet's name (1..64 bytes, no blanks, braces "
          .. "or colons; every key carries it), got " .. tostring(opts.fleet), 2)
  end
  for _, f in ipairs { "password", "sentinel_password" } do
    if opts[f] ~= nil then
      error(format("nres.sync: %s: never inline; expected %s_file or %s_env", f, f, f), 2)
    end
  end
  local redis = opts.redis or "127.0.0.1:6379"
  if type(redis) == "string" and redis:sub(1, 5) == "unix:" and #redis > 5 then
    keep[#keep + 1] = redis:sub(6)
    cfg.unix_path = keep[#keep]
  else
    local host, port = tostring(redis):match("^(.*):(%d+)$")
    if not host then error("nres.sync: redis: expected \"host:port\" or \"unix:/path\", got " .. tostring(opts.redis), 2) end
    keep[#keep + 1] = host
    cfg.host, cfg.port = keep[#keep], tonumber(port)
  end
  if opts.sentinels ~= nil or opts.master ~= nil then
    keep[#keep + 1] = addr_list("sentinels", opts.sentinels)
    cfg.sentinels = keep[#keep]
    if not name_ok(opts.master, 127) then error(bad(1, "new", "master: the Sentinel master's name", opts.master), 2) end
    keep[#keep + 1] = opts.master
    cfg.master = keep[#keep]
  end
  if opts.cluster ~= nil then
    if cfg.sentinels ~= nil or opts.db ~= nil then
      error("nres.sync: cluster: expected neither sentinels nor db with it", 2)
    end
    keep[#keep + 1] = addr_list("cluster", opts.cluster)
    cfg.cluster = keep[#keep]
  end
  local tls = opts.tls
  if tls ~= nil and tls ~= false then
    if tls ~= true and type(tls) ~= "table" then
      error(bad(1, "new", "tls: true or a table { ca_file, cert_file, key_file, server_name }", tls), 2)
    end
    cfg.tls = 1
    if type(tls) == "table" then
      for k, v in pairs(tls) do
        local field = ({ ca_file = "tls_ca_file", cert_file = "tls_cert_file",
                         key_file = "tls_key_file", server_name = "tls_server_name" })[k]
        if not field then error("nres.sync: tls." .. tostring(k) .. ": unknown field", 2) end
        if not name_ok(v, 4096) then error(bad(1, "new", "tls." .. k .. ": a string", v), 2) end
        keep[#keep + 1] = v
        cfg[field] = keep[#keep]
      end
    end
  end
  keep[#keep + 1] = opts.prefix or "nres"
  cfg.prefix = keep[#keep]
  keep[#keep + 1] = opts.fleet
  cfg.fleet = keep[#keep]
  if opts.node then keep[#keep + 1] = opts.node; cfg.node = keep[#keep] end
  credential(opts, cfg, keep, "")
  credential(opts, cfg, keep, "sentinel_")
  if (opts.sentinel_user or opts.sentinel_password_file or opts.sentinel_password_env)
     and opts.sentinels == nil then
    error("nres.sync: sentinel_user, sentinel_password_file, sentinel_password_env: "
          .. "expected sentinels too, got none", 2)
  end
  local db = opts.db
  if db ~= nil then
    if type(db) ~= "number" or db < 0 or db > 1000000 or db % 1 ~= 0 then
      error(bad(1, "new", "db: a whole number >= 0", db), 2)
    end
    cfg.db = db
  end
  local q = opts.breaker_quorum
  if q ~= nil then
    if type(q) ~= "number" or not (q >= 0 and q < 1) then
      error(bad(1, "new", "breaker_quorum: a share in [0, 1)", q), 2)
    end
    cfg.breaker_quorum = q
  end
  local fr = opts.breaker_fleet_ratio
  if fr ~= nil then
    if type(fr) ~= "number" or not (fr >= 0 and fr <= 1) then
      error(bad(1, "new", "breaker_fleet_ratio: a share in [0, 1]", fr), 2)
    end
    cfg.breaker_fleet_ratio = fr
  end
  local mc = opts.breaker_fleet_min_calls
  if mc ~= nil then
    if type(mc) ~= "number" or mc < 1 or mc > 1e9 or mc % 1 ~= 0 then
      error(bad(1, "new", "breaker_fleet_min_calls: a whole number from 1 to 1e9", mc), 2)
    end
    cfg.breaker_fleet_min_calls = mc
  end
  for _, f in ipairs { "interval", "timeout", "reconnect_max", "ttl", "probe_lease" } do
    local v = opts[f]
    if type(v) == "string" then v = unit_seconds(v) or v end   -- "500ms", "2m"
    if v ~= nil then
      if type(v) ~= "number" or not (v >= 0 and v < 1e9) then
        error(format('nres.sync: %s: expected seconds (a number >= 0, or with a unit: "500ms", "2m"), got %s',
                     f, tostring(v)), 2)
      end
      cfg[f] = v * 1e9
    end
  end
  cfg.local_share = opts.local_share or 0
  local out = ffi_new("nres_sync_t *[1]")
  local rc = S.nres_sync_new(cfg, out)
  if rc ~= 0 then return nil, ffi_string(cdef.C.nres_strerror(rc)) end
  return setmetatable({ agent = ffi_gc(out[0], S.nres_sync_free), keep = keep, refs = {}, ids = {} }, mt)
end

-- Sync `target` under `scope`: a policy (its budget and rate limiter, and
-- its breaker with what.breaker) or an nres_budget_t *, nres_ratelimit_t *
-- or nres_breaker_t *. what: { budget = false, ratelimit = false, breaker =
-- true, floor = fleet floor per s, rate = fleet rate per s, burst = fleet
-- burst } (figures default to the local state's). Returns the entry ids
-- added.
function _M.add(self, scope, target, what)
  if type(scope) ~= "string" or #scope == 0 or #scope > 127 then
    error(bad(1, "add", "a scope name of 1..127 bytes", scope), 2)
  end
  what = what or {}
  local b, l, br
  if type(target) == "table" and target.cp then
    local cp = target.cp
    if what.budget ~= false and cp.budget ~= nil then b = cp.budget end
    if what.ratelimit ~= false and cp.ratelimit ~= nil then l = cp.ratelimit end
    if what.breaker and cp.breaker ~= nil then br = cp.breaker end
  elseif ffi.istype("nres_budget_t *", target) then b = target
  elseif ffi.istype("nres_ratelimit_t *", target) then l = target
  elseif ffi.istype("nres_breaker_t *", target) then br = target
  else
    error(bad(2, "add", "a policy or an nres_budget_t/ratelimit_t/breaker_t *", target), 2)
  end
  local burst = what.burst
  if burst ~= nil and (type(burst) ~= "number" or burst < 1 or burst > 4294967295
                       or burst % 1 ~= 0) then
    error(bad(3, "add", "what.burst: a whole number of admissions >= 1", burst), 2)
  end
  local ids = {}
  local function added(id)
    if id < 0 then error("nres.sync: add " .. scope .. ": " .. ffi_string(cdef.C.nres_strerror(id)), 3) end
    ids[#ids + 1] = id
    self.ids[#self.ids + 1] = id
  end
  if b then added(S.nres_sync_add_budget(self.agent, scope, b, what.floor or -1)) end
  if l then added(S.nres_sync_add_ratelimit_burst(self.agent, scope, l, what.rate or 0, burst or 0)) end
  if br then added(S.nres_sync_add_breaker(self.agent, scope, br)) end
  self.refs[#self.refs + 1] = target   -- keep the state alive while synced
  if type(target) == "table" and target.cp then
    -- p:stats().fleet: this policy's entries, as the agent sees them now.
    local agent, mine = self, ids
    target.fleet_stats = function() return agent:entries_of(mine) end
  end
  return ids
end

function _M.start(self) return S.nres_sync_start(self.agent) == 0 end
function _M.stop(self) S.nres_sync_stop(self.agent) end
-- One round now, on this thread (not with the thread running): true if it
-- reached Redis.
function _M.tick(self) return S.nres_sync_tick(self.agent, cdef.C.nres_step_now()) == 0 end
-- Between rounds run with tick: true if Redis still answers; if not, every
-- entry falls back to local-only protection now (nres_sync_probe).
function _M.probe(self) return S.nres_sync_probe(self.agent, cdef.C.nres_step_now()) == 0 end

local info = ffi_new("nres_sync_info_t")
local st = ffi_new("nres_sync_stats_t")

-- The agent's view of entries `ids`: connected, seconds since its last
-- good round (nil before the first), and per entry whether it follows the
-- fleet and the fleet's figures.
function _M.entries_of(self, ids)
  S.nres_sync_info(self.agent, info)
  local s = {
    node = ffi_string(S.nres_sync_node(self.agent)),
    connected = info.connected == 1, rounds = tonumber(info.rounds),
    failures = tonumber(info.failures), connects = tonumber(info.connects),
    errors = tonumber(info.errors), error = info.error[0] ~= 0 and ffi_string(info.error) or nil,
    last_sync_age = info.last_sync > 0
      and math.max(0, cdef.C.nres_step_now() - tonumber(info.last_sync)) / 1e9 or nil,
    entries = {},
  }
  for _, id in ipairs(ids) do
    if S.nres_sync_stats(self.agent, id, st) == 0 then
      s.entries[#s.entries + 1] = {
        scope = ffi_string(st.scope), kind = kinds[st.kind], synced = st.synced == 1,
        hosts = st.hosts, fleet = st.fleet, ["local"] = st["local"],
        demand = st.demand, prober = st.prober == 1, rounds = tonumber(st.rounds),
        leases_expired = tonumber(st.leases_expired),
      }
    end
  end
  return s
end

function _M.stats(self) return self:entries_of(self.ids) end

-- nres-syncd's --status file, decoded (lua-cjson) or as its text; nil and
-- a reason if it cannot be read.
function _M.status(path)
  local f, err = io.open(path, "r")
  if not f then return nil, err end
  local text = f:read("*a")
  f:close()
  local ok, cjson = pcall(require, "cjson.safe")
  if ok then return cjson.decode(text) or text end
  return text
end

return _M
