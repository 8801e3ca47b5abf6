-- SPDX-License-Identifier: MIT
-- sync_spec.lua - nres.sync, the Lua face of fleet sync (runtime/include/
-- nres/sync.h), against a redis-server of its own (127.0.0.1, a free port
-- below the kernel's ephemeral range, or $NRES_SYNC_PORT; a temporary
-- directory; killed at the end). Two policies in this LuaJIT stand for two
-- hosts: rounds are run by hand (agent:tick), so nothing depends on
-- timing. Exits 77 (skipped) without redis-server.
local nres = require "nres"
local sync = require "nres.sync"
local ffi = require "ffi"

if os.execute("command -v redis-server >/dev/null 2>&1") ~= 0 then
  print("redis-server is not installed (Debian: redis-server): skipped")
  os.exit(77)
end

ffi.cdef [[
int socket(int domain, int type, int protocol);
int bind(int fd, const void *addr, unsigned int len);
int close(int fd);
]]

-- Nobody holds TCP port p on 127.0.0.1 now (bind succeeds).
local function port_free(p)
  local sa = ffi.new("uint8_t[16]")
  sa[0], sa[1] = 2, 0                          -- AF_INET, little-endian
  sa[2], sa[3] = math.floor(p / 256), p % 256  -- port, network order
  sa[4], sa[5], sa[6], sa[7] = 127, 0, 0, 1
  local fd = ffi.C.socket(2, 1, 0)
  local ok = ffi.C.bind(fd, sa, 16) == 0
  ffi.C.close(fd)
  return ok
end

-- A free port taken below the ephemeral range so no client socket of a
-- test beside us takes it (and below 55536: a Cluster node's bus port is
-- its port + 10000); with `bus`, its bus port is free too.
local function free_port(bus)
  local low = 32768
  local f = io.open("/proc/sys/net/ipv4/ip_local_port_range")
  if f then low = tonumber(f:read("*n")) or low; f:close() end
  local hi = low > 21000 and low - 1 or 55535
  if hi > 55535 then hi = 55535 end
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 100000)
  for _ = 1, 100 do
    local p = math.random(20000, hi)
    if port_free(p) and (not bus or port_free(p + 10000)) then return p end
  end
  error("no free port found")
end

local port = tonumber(os.getenv("NRES_SYNC_PORT") or "") or free_port()
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local pidfile = dir .. "/redis.pid"
assert(os.execute(string.format("redis-server --port %d --bind 127.0.0.1 --dir %s --save '' "
  .. "--appendonly no --daemonize yes --pidfile %s >/dev/null", port, dir, pidfile)) == 0)
local function stop_redis()
  os.execute(string.format("kill $(cat %s) $(cat %s/auth.pid 2>/dev/null) $(cat %s/tls.pid 2>/dev/null) "
    .. "$(cat %s/c*.pid 2>/dev/null) 2>/dev/null; sleep 0.2; rm -rf %s", pidfile, dir, dir, dir, dir))
end
for _ = 1, 100 do   -- until it answers
  if sync.new{ fleet = "t", redis = "127.0.0.1:" .. port }:tick() then break end
  os.execute("sleep 0.05")
end

describe("nres.sync", function()
  it("refuses bad settings by name", function()
    local ok, err = pcall(sync.new, { fleet = "t", redis = "nowhere" })
    expect.truthy(not ok)
    expect.truthy(err:find("redis", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", interval = -1 })
    expect.truthy(not ok)
    expect.truthy(err:find("interval", 1, true), err)
  end)

  it("two hosts share one fleet budget and report it", function()
    local spec = { attempts = 3, budget = { ratio = 0.1, min_per_sec = 0, capacity = 10 } }
    local p1, p2 = nres.policy(spec), nres.policy(spec)
    local a1 = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. port, node = "l1", prefix = "lua" })
    local a2 = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. port, node = "l2", prefix = "lua" })
    expect.eq(#a1:add("api", p1), 1)   -- a budget, no limiter, no breaker
    expect.eq(#a2:add("api", p2), 1)
    for _ = 1, 3 do
      expect.truthy(a1:tick())
      expect.truthy(a2:tick())
    end
    local s = a1:stats()
    expect.truthy(s.connected)
    expect.eq(s.node, "l1")
    local e = s.entries[1]
    expect.eq(e.scope, "api")
    expect.eq(e.kind, "budget")
    expect.truthy(e.synced)
    expect.eq(e.hosts, 2)
    expect.eq(e.fleet, 10)
    -- Each host holds half of the fleet's 10 tokens, not 10 of its own.
    expect.eq(p1:stats().budget, 5)
    expect.eq(p2:stats().budget, 5)
    -- p:stats() says the policy is fleet-synced, and since when.
    local f = p1:stats().fleet
    expect.truthy(f and f.connected, "p:stats().fleet")
    expect.eq(#f.entries, 1)
    expect.truthy(f.entries[1].synced and f.entries[1].hosts == 2 and f.entries[1].fleet == 10)
    expect.truthy(f.last_sync_age >= 0 and f.last_sync_age < 5, "last sync age " .. tostring(f.last_sync_age))
    expect.eq(nres.policy(spec):stats().fleet, nil, "a policy no agent syncs has no fleet view")
  end)

  it("splits the fleet's burst with the rate, and probes between rounds", function()
    local C = require("nres.cdef").C
    local ffi = require "ffi"
    local mem = ffi.new("nres_ratelimit_t[2]")   -- kept referenced below
    local l1, l2 = ffi.cast("nres_ratelimit_t *", mem), ffi.cast("nres_ratelimit_t *", mem + 1)
    expect.eq(C.nres_ratelimit_init(l1, 100, 20), 0)
    expect.eq(C.nres_ratelimit_init(l2, 100, 20), 0)
    local a1 = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. port, node = "b1", prefix = "luab" })
    local a2 = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. port, node = "b2", prefix = "luab" })
    local ok, err = pcall(a1.add, a1, "api", l1, { burst = 0 })
    expect.truthy(not ok and err:find("what.burst", 1, true), err)
    ok, err = pcall(a1.add, a1, "api", l1, { burst = 2.5 })
    expect.truthy(not ok and err:find("what.burst", 1, true), err)
    a1:add("api", l1, { burst = 20 })   -- the fleet's figures given
    a2:add("api", l2, { rate = 100, burst = 20 })
    for _ = 1, 3 do
      expect.truthy(a1:tick())
      expect.truthy(a2:tick())
    end
    expect.truthy(a1:probe())
    -- Two hosts, no demand: half the rate and half the burst each.
    for _, l in ipairs{ l1, l2 } do
      expect.eq(math.floor(1e9 / tonumber(l.interval) + 0.5), 50)
      expect.eq(tonumber(l.tolerance / l.interval), 10)
    end
    expect.truthy(mem ~= nil)
  end)

  it("requires the fleet's name and never takes a password inline", function()
    local ok, err = pcall(sync.new, { redis = "127.0.0.1:1" })
    expect.truthy(not ok and err:find("fleet", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "a:b" })
    expect.truthy(not ok and err:find("fleet", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", password = "secret" })
    expect.truthy(not ok and err:find("password", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", user = "alice" })
    expect.truthy(not ok and err:find("user", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", password_env = "NRES_SURELY_UNSET_VAR" })
    expect.truthy(not ok and err:find("password_env", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", password_file = "/nonexistent/pw" })
    expect.truthy(not ok and err:find("password_file", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinels = { "a:1", "nope" }, master = "m" })
    expect.truthy(not ok and err:find("sentinels[2]", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinels = { "a:1" } })
    expect.truthy(not ok and err:find("master", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", cluster = {} })
    expect.truthy(not ok and err:find("cluster", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", cluster = { "a:1" }, db = 1 })
    expect.truthy(not ok and err:find("cluster", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", breaker_quorum = 1 })
    expect.truthy(not ok and err:find("breaker_quorum", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinel_password = "secret" })
    expect.truthy(not ok and err:find("sentinel_password: never inline", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinels = { "a:1" }, master = "m",
                                sentinel_password_env = "NRES_SURELY_UNSET_VAR" })
    expect.truthy(not ok and err:find("sentinel_password_env", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinels = { "a:1" }, master = "m", sentinel_user = "s" })
    expect.truthy(not ok and err:find("sentinel_user: expected a password too", 1, true), err)
    ok, err = pcall(sync.new, { fleet = "t", sentinel_password_file = "/dev/null" })
    expect.truthy(not ok and err:find("expected sentinels too", 1, true), err)
    for _, v in ipairs { -0.1, 1.5, "x" } do
      ok, err = pcall(sync.new, { fleet = "t", breaker_fleet_ratio = v })
      expect.truthy(not ok and err:find("breaker_fleet_ratio", 1, true), err)
    end
    for _, v in ipairs { 0, 2.5, 2e9 } do
      ok, err = pcall(sync.new, { fleet = "t", breaker_fleet_min_calls = v })
      expect.truthy(not ok and err:find("breaker_fleet_min_calls", 1, true), err)
    end
    local fr = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. port,
                                breaker_fleet_ratio = 0.5, breaker_fleet_min_calls = 40 })
    fr:add("ratio", nres.policy{ attempts = 1, breaker = { ratio = 0.5 } }, { breaker = true })
    expect.truthy(fr:tick(), "a round with the fleet ratio on")
    -- Two fleets on one Redis keep apart records.
    local p1 = nres.policy{ attempts = 3, budget = { ratio = 0.1, min_per_sec = 0, capacity = 10 } }
    local p2 = nres.policy{ attempts = 3, budget = { ratio = 0.1, min_per_sec = 0, capacity = 10 } }
    local a1 = assert(sync.new{ fleet = "staging", redis = "127.0.0.1:" .. port, node = "s1" })
    local a2 = assert(sync.new{ fleet = "production", redis = "127.0.0.1:" .. port, node = "p1" })
    a1:add("split", p1)
    a2:add("split", p2)
    for _ = 1, 2 do expect.truthy(a1:tick()); expect.truthy(a2:tick()) end
    expect.eq(a1:stats().entries[1].hosts, 1)
    expect.eq(a2:stats().entries[1].hosts, 1)
  end)

  it("authenticates as an ACL user over a unix socket, password from a file", function()
    local aport = free_port()
    local sock = dir .. "/auth.sock"
    assert(os.execute(string.format("redis-server --port %d --bind 127.0.0.1 --dir %s --save '' "
      .. "--appendonly no --daemonize yes --pidfile %s/auth.pid --requirepass main-pw "
      .. "--user alice on '>alice-pw' '~*' '+@all' --unixsocket %s --unixsocketperm 700 >/dev/null",
      aport, dir, dir, sock)) == 0)
    local pw = dir .. "/alice.pw"
    local f = assert(io.open(pw, "w"))
    f:write("alice-pw\n")
    f:close()
    local up
    for _ = 1, 100 do
      local a = sync.new{ fleet = "t", redis = "unix:" .. sock, user = "alice", password_file = pw, db = 2 }
      a:add("x", nres.policy{ attempts = 2, budget = { ratio = 0.1, capacity = 10 } })
      up = a:tick()
      if up then break end
      os.execute("sleep 0.05")
    end
    expect.truthy(up, "synced over the unix socket as alice")
    -- Without the password: a round fails and the agent says why.
    local a = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. aport })
    a:add("x", nres.policy{ attempts = 2, budget = { ratio = 0.1, capacity = 10 } })
    expect.truthy(not a:tick())
    local st = a:stats()
    expect.truthy(st.error and st.error:find("NOAUTH", 1, true), tostring(st.error))
    os.execute(string.format("kill $(cat %s/auth.pid) 2>/dev/null", dir))
  end)

  it("reaches a TLS-only Redis, verified against a CA made here", function()
    if os.execute("command -v openssl >/dev/null 2>&1") ~= 0 then return end
    local t = dir .. "/tls"
    local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    local sh = table.concat({
      "set -e", "mkdir -p " .. t, "cd " .. t,
      "openssl req -x509 -new " .. ec .. " -keyout ca.key -out ca.crt -days 1 -subj /CN=nres-test-ca",
      "openssl req -x509 -new " .. ec .. " -keyout other.key -out other.crt -days 1 -subj /CN=other-ca",
      "openssl req -new " .. ec .. " -keyout server.key -out server.csr -subj /CN=redis",
      "printf 'subjectAltName=IP:127.0.0.1' > ext",
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile ext",
      "openssl req -new " .. ec .. " -keyout client.key -out client.csr -subj /CN=nres-agent",
      "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 1",
    }, " && ") .. " >/dev/null 2>&1"
    expect.eq(os.execute(sh), 0, "test CA and certificates made")
    local tport = free_port()
    assert(os.execute(string.format("redis-server --port 0 --tls-port %d --bind 127.0.0.1 --dir %s "
      .. "--save '' --appendonly no --daemonize yes --pidfile %s/tls.pid --tls-cert-file %s/server.crt "
      .. "--tls-key-file %s/server.key --tls-ca-cert-file %s/ca.crt >/dev/null", tport, dir, dir, t, t, t)) == 0)
    local function agent(ca)
      local a = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. tport, timeout = 0.5,
        tls = { ca_file = t .. "/" .. ca, cert_file = t .. "/client.crt", key_file = t .. "/client.key" } })
      a:add("tls", nres.policy{ attempts = 2, budget = { ratio = 0.1, capacity = 10 } })
      return a
    end
    local up
    for _ = 1, 100 do
      up = agent("ca.crt"):tick()
      if up then break end
      os.execute("sleep 0.05")
    end
    expect.truthy(up, "synced over TLS")
    -- A server whose certificate another CA signed is refused, and said.
    local a = agent("other.crt")
    expect.truthy(not a:tick())
    local st = a:stats()
    expect.truthy(st.error and st.error:find("certificate", 1, true), tostring(st.error))
    -- Plain text to the TLS port is no answer either.
    a = assert(sync.new{ fleet = "t", redis = "127.0.0.1:" .. tport, timeout = 0.3 })
    a:add("plain", nres.policy{ attempts = 2, budget = { ratio = 0.1, capacity = 10 } })
    expect.truthy(not a:tick())
    os.execute(string.format("kill $(cat %s/tls.pid) 2>/dev/null", dir))

    -- A Cluster over TLS: three primaries, TLS on their bus too
    -- (tls-cluster), joined by redis-cli --cluster create over TLS; each
    -- node serves some of 30 scopes and runs their calls.
    if os.execute("command -v redis-cli >/dev/null 2>&1") ~= 0 then return end
    local tls_files = string.format("--tls-cert-file %s/server.crt --tls-key-file %s/server.key "
      .. "--tls-ca-cert-file %s/ca.crt", t, t, t)
    local cli = string.format("redis-cli --tls --cacert %s/ca.crt --cert %s/client.crt --key %s/client.key",
                              t, t, t)
    local cports, seeds = {}, {}
    for i = 1, 3 do
      local p
      repeat p = free_port(true) until p ~= cports[1] and p ~= cports[2]
      cports[i] = p
      seeds[i] = "127.0.0.1:" .. p
      assert(os.execute(string.format("mkdir -p %s/c%d && redis-server --port 0 --tls-port %d "
        .. "--bind 127.0.0.1 --dir %s/c%d --save '' --appendonly no --daemonize yes "
        .. "--pidfile %s/c%d.pid --cluster-enabled yes --cluster-node-timeout 2000 "
        .. "--tls-cluster yes --tls-replication yes %s >/dev/null",
        dir, i, p, dir, i, dir, i, tls_files)) == 0)
    end
    local function ask(p, cmd)
      local f = io.popen(string.format("%s -p %d %s 2>/dev/null", cli, p, cmd))
      local out = f:read("*a")
      f:close()
      return out
    end
    for _, p in ipairs(cports) do
      for _ = 1, 100 do
        if ask(p, "PING"):find("PONG", 1, true) then break end
        os.execute("sleep 0.05")
      end
    end
    expect.eq(os.execute(string.format("%s --cluster create %s --cluster-yes >%s/create.log 2>&1",
                                       cli, table.concat(seeds, " "), dir)), 0, "cluster created over TLS")
    local formed
    for _ = 1, 200 do
      formed = true
      for _, p in ipairs(cports) do
        formed = formed and ask(p, "CLUSTER INFO"):find("cluster_state:ok", 1, true) ~= nil
      end
      if formed then break end
      os.execute("sleep 0.05")
    end
    expect.truthy(formed, "cluster_state:ok on the three nodes")
    local c = assert(sync.new{ fleet = "t", cluster = { seeds[1] }, timeout = 0.5,
      tls = { ca_file = t .. "/ca.crt", cert_file = t .. "/client.crt", key_file = t .. "/client.key" } })
    local keep = {}
    for i = 1, 30 do
      keep[i] = nres.policy{ attempts = 2, budget = { ratio = 0.1, capacity = 10 } }
      c:add("c" .. i, keep[i])
    end
    local synced
    for _ = 1, 100 do
      synced = c:tick()
      if synced then break end
      os.execute("sleep 0.05")
    end
    expect.truthy(synced, "every scope synced through a TLS Cluster: " .. tostring(c:stats().error))
    for _, p in ipairs(cports) do
      local n = tonumber(ask(p, "INFO commandstats"):match("cmdstat_evalsha:calls=(%d+)") or "0")
      expect.truthy(n > 0, "node " .. p .. " ran its scopes' calls")
    end
    for i = 1, 3 do os.execute(string.format("kill $(cat %s/c%d.pid) 2>/dev/null", dir, i)) end
  end)

  it("falls back to local protection without Redis", function()
    local p = nres.policy{ attempts = 3, budget = { ratio = 0.1, min_per_sec = 0, capacity = 10 } }
    local a = assert(sync.new{ fleet = "t", redis = "127.0.0.1:1", local_share = 0.5, interval = 0.01 })
    a:add("api", p)
    expect.truthy(not a:tick())
    local s = a:stats()
    expect.truthy(not s.connected)
    expect.eq(s.failures, 1)
    expect.truthy(not s.entries[1].synced)
    expect.eq(p:stats().budget, 5)   -- local_share of the capacity
    expect.truthy(not a:probe())       -- not connected: nothing answers
  end)
end)

stop_redis()
