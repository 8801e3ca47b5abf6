-- SPDX-License-Identifier: MIT
-- resolve_spec.lua - nres.ngx.resolve outside nginx (peers by name; the
-- nginx side with a real DNS server is spec/nginx/dns.sh): the `resolve`
-- table's checks, the system resolver read from a resolv.conf, address
-- texts (IPv6 compressed as RFC 5952 says), and a lookup's rules against
-- a fake resolver that answers from the real query (every answer read by
-- nres_dns_reply): both families, the smallest TTL, a failed family
-- keeping its last good addresses, nothing known at all.
local ffi = require "ffi"
local resolve = require "nres.ngx.resolve"
local C = require("nres.cdef").C

describe("nres.ngx.resolve", function()
  it("checks the resolve table field by field", function()
    local function refused(r, want)
      expect.error(function() resolve.settings(r) end, want)
    end
    refused({ resolvr = "127.0.0.1" }, "nres.ngx.upstream: resolve.resolvr: expected one of"
            .. " resolver, min_ttl, max_ttl, timeout, ipv6, got an unknown field")
    local addr = 'nres.ngx.upstream: resolve.resolver: expected "address[:port]" (an IP address,'
                 .. ' e.g. "127.0.0.1:53" or "[::1]:53"; nil: /etc/resolv.conf\'s), got '
    refused({ resolver = "dns.test:53" }, addr .. '"dns.test:53"')
    refused({ resolver = "127.0.0.1:0" }, addr .. '"127.0.0.1:0"')
    refused({ resolver = "::1" }, addr .. '"::1"')
    refused({ resolver = 53 }, addr .. "53")
    refused({ resolver = "127.0.0.1", min_ttl = 0.05 },
            "nres.ngx.upstream: resolve.min_ttl: expected at least 0.1 s, got 0.05")
    refused({ resolver = "127.0.0.1", min_ttl = 10, max_ttl = 5 },
            "nres.ngx.upstream: resolve.max_ttl: expected min_ttl (10 s) .. 1 day, got 5")
    refused({ resolver = "127.0.0.1", timeout = 0 },
            "nres.ngx.upstream: resolve.timeout: expected 0.01 s .. 30 s, got 0")
    refused({ resolver = "127.0.0.1", ipv6 = "no" },
            'nres.ngx.upstream: resolve.ipv6: expected true (A and AAAA) or false (A only), got "no"')
    refused("x", 'nres.ngx.upstream: resolve: expected a table, got "x"')
    local s = resolve.settings({ resolver = "[::1]:5353", min_ttl = "2s", max_ttl = "1m" })
    expect.eq(s.resolver, "[::1]:5353")
    expect.eq(s.host, "::1")
    expect.eq(s.port, 5353)
    expect.eq(s.min_ttl, 2)
    expect.eq(s.max_ttl, 60)
    expect.eq(s.ipv6, true)
    s = resolve.settings({ resolver = "127.0.0.1" })
    expect.eq(s.port, 53)
    expect.eq(s.min_ttl, 1)
    expect.eq(s.max_ttl, 300)
    expect.eq(resolve.wait(s, 0), 1)      -- a failure, or TTL 0: min_ttl
    expect.eq(resolve.wait(s, 60), 60)
    expect.eq(resolve.wait(s, 86400), 300)
  end)

  it("takes the system's resolver from resolv.conf", function()
    local path = os.tmpname()
    local function with(text)
      local f = assert(io.open(path, "w"))
      f:write(text)
      f:close()
      return resolve.system_resolver(path)
    end
    expect.eq(with("# x\nsearch test\nnameserver 10.0.0.53\nnameserver 10.0.0.54\n"),
              "10.0.0.53")
    expect.eq(with("  nameserver fd00::53\n"), "[fd00::53]")
    expect.eq(with("search test\n"), "127.0.0.1")
    os.remove(path)
    expect.eq(resolve.system_resolver(path), "127.0.0.1")
  end)

  it("writes addresses as peers", function()
    local b = ffi.new("uint8_t[16]")
    local function v6(words)
      for i = 0, 7 do
        b[2 * i], b[2 * i + 1] = math.floor(words[i + 1] / 256), words[i + 1] % 256
      end
      return resolve.peer_of(b, 16, 8080)
    end
    b[0], b[1], b[2], b[3] = 10, 0, 0, 1
    expect.eq(resolve.peer_of(b, 4, 80), "10.0.0.1:80")
    expect.eq(v6 { 0, 0, 0, 0, 0, 0, 0, 1 }, "[::1]:8080")
    expect.eq(v6 { 0xfd00, 0, 0, 1, 0, 0, 0, 1 }, "[fd00:0:0:1::1]:8080")   -- the longest run
    expect.eq(v6 { 0xfd00, 0, 0, 1, 0, 0, 1, 1 }, "[fd00::1:0:0:1:1]:8080")  -- a tie: the first
    expect.eq(v6 { 0xfd00, 1, 0, 1, 0, 0, 0, 0 }, "[fd00:1:0:1::]:8080")
    expect.eq(v6 { 0xfd00, 1, 0, 1, 2, 3, 4, 5 }, "[fd00:1:0:1:2:3:4:5]:8080")
    expect.eq(v6 { 0, 0, 0, 0, 0, 0, 0, 0 }, "[::]:8080")
  end)

  -- A fake resolver: answers[qtype] is { rcode = n, ttl = s, addrs = { bytes... } }
  -- or "timeout"; the reply is built from the query itself and read by
  -- nres_dns_reply, as a real one would be.
  local function fake(answers)
    return function(_, q, qlen, out, why)
      local a = answers[q[qlen - 3]]
      if a == "timeout" then return -110 end
      local msg = { ffi.string(q, qlen) }
      local n = 0
      for _, addr in ipairs(a.addrs or {}) do
        msg[#msg + 1] = "\192\12" .. string.char(0, q[qlen - 3], 0, 1) .. string.char(
          0, 0, 0, a.ttl, 0, #addr) .. addr
        n = n + 1
      end
      local m = table.concat(msg)
      m = m:sub(1, 2) .. string.char(0x81, 0x80 + (a.rcode or 0), 0, 1, 0, n) .. m:sub(9)
      return C.nres_dns_reply(m, #m, q, qlen, out, why)
    end
  end
  local V6 = ("\0"):rep(15) .. "\1"

  it("resolves both families, keeping a failed family's last good addresses", function()
    local s = resolve.settings({ resolver = "127.0.0.1" })
    local set, ttl, why = resolve.lookup(s, "app.test", 80, fake {
      [1] = { ttl = 30, addrs = { "\10\0\0\2", "\10\0\0\1", "\10\0\0\1" } },
      [28] = { ttl = 10, addrs = { V6 } } })
    expect.eq(table.concat(set, " "), "10.0.0.1:80 10.0.0.2:80 [::1]:80")
    expect.eq(ttl, 10)
    expect.eq(why, nil)
    -- A fails: its addresses of the last good set stay, AAAA's are new
    set, ttl, why = resolve.lookup(s, "app.test", 80, fake {
      [1] = { rcode = 2 }, [28] = { ttl = 10, addrs = {} } },
      { "10.0.0.9:80", "[fd00::9]:80" })
    expect.eq(table.concat(set, " "), "10.0.0.9:80")
    expect.eq(why, "A: SERVFAIL")
    set, ttl, why = resolve.lookup(s, "app.test", 80, fake {
      [1] = { ttl = 5, addrs = { "\10\0\0\3" } }, [28] = "timeout" }, { "[fd00::9]:80" })
    expect.eq(table.concat(set, " "), "10.0.0.3:80 [fd00::9]:80")
    expect.eq(ttl, 5)
    expect.eq(why, "AAAA: timeout")
    -- nothing known: a failure
    set, ttl, why = resolve.lookup(s, "app.test", 80, fake { [1] = { rcode = 3 }, [28] = "timeout" })
    expect.eq(set, nil)
    expect.eq(why, "A: NXDOMAIN")
    set, ttl, why = resolve.lookup(s, "app.test", 80, fake { [1] = {}, [28] = {} })
    expect.eq(set, nil)
    expect.eq(why, "no address")
    -- ipv6 = false: one query, A
    s = resolve.settings({ resolver = "127.0.0.1", ipv6 = false })
    set = resolve.lookup(s, "app.test", 80, fake { [1] = { ttl = 1, addrs = { "\10\0\0\1" } },
                                                   [28] = "timeout" })
    expect.eq(table.concat(set, " "), "10.0.0.1:80")
  end)

  it("follows the set: adds first, drains, removes after the deadline, restores", function()
    local ops, refuse = {}, {}
    local real = package.loaded["nres.ngx.control"]
    package.loaded["nres.ngx.control"] = { apply = function(op)
      if refuse[op.action] then return nil, 409, "refused" end
      ops[#ops + 1] = op.action .. " " .. op.peer .. (op.weight and " w" .. op.weight or "")
      return { changed = op.action }
    end }
    local u = { name = "b", deadline = 3600e9 }   -- no removal yet
    local n = { entry = { "app.test:80", weight = 2 } }
    local t = { dns = { "10.0.0.2:80" }, applied = { "10.0.0.1:80" }, draining = { 0 } }
    local ok, err = pcall(function()
      resolve.reconcile(u, n, t)
      expect.eq(table.concat(ops, ", "), "add 10.0.0.2:80 w2, drain 10.0.0.1:80")
      expect.eq(table.concat(t.applied, " "), "10.0.0.2:80 10.0.0.1:80")
      expect.eq(t.draining[1], 0)
      expect.truthy(t.draining[2] > 0, "10.0.0.1 drains")
      ops = {}
      resolve.reconcile(u, n, t)   -- within the deadline: nothing
      expect.eq(#ops, 0)
      t.dns = { "10.0.0.1:80", "10.0.0.2:80" }   -- back while it drains
      resolve.reconcile(u, n, t)
      expect.eq(table.concat(ops, ", "), "restore 10.0.0.1:80")
      expect.eq(t.draining[2], 0)
      ops, t.dns = {}, { "10.0.0.2:80" }
      resolve.reconcile(u, n, t)
      u.deadline = 0                -- the deadline passed: removed
      resolve.reconcile(u, n, t)
      expect.eq(table.concat(ops, ", "), "drain 10.0.0.1:80, remove 10.0.0.1:80")
      expect.eq(table.concat(t.applied, " "), "10.0.0.2:80")
      -- a refused add is tried again next time, not recorded as applied
      ops, refuse.add, t.dns = {}, true, { "10.0.0.2:80", "10.0.0.3:80" }
      resolve.reconcile(u, n, t)
      expect.eq(table.concat(t.applied, " "), "10.0.0.2:80")
      refuse.add = nil
      resolve.reconcile(u, n, t)
      expect.eq(table.concat(ops, ", "), "add 10.0.0.3:80 w2")
    end)
    package.loaded["nres.ngx.control"] = real
    assert(ok, err)
  end)

  it("reads a name's record as input", function()
    local rec = ffi.new("nres_ngx_name_t")
    ffi.copy(rec.name, "app.test")
    rec.port, rec.ndns = 80, 1
    ffi.copy(rec.dns[0], "10.0.0.1:80")
    expect.eq(resolve.snapshot(rec).dns[1], "10.0.0.1:80")
    rec.seq = 1                          -- a writer died mid-write
    expect.eq(resolve.snapshot(rec), nil)
    expect.eq(resolve.snapshot(rec, true).name, "app.test")   -- the next writer reads on
    rec.seq, rec.ndns = 2, 1000          -- out of range
    expect.eq(resolve.snapshot(rec), nil)
    rec.ndns = 1
    ffi.fill(rec.name, 256, 65)          -- no NUL: ends at the field's end
    expect.eq(#resolve.snapshot(rec).name, 256)
  end)

  it("refuses a bad name and a resolve table with no name", function()
    local gw = require "nres.ngx"
    gw.scope("rs", { policy = "gateway", slots = 8 })
    expect.error(function() gw.upstream("r1", { scope = "rs", peers = { "a..b:80" } }) end,
      "nres.ngx.upstream: peers[1]: expected \"host:port\" with a DNS name (labels of letters,"
      .. " digits, '-' and '_', 1..63 bytes, 253 in all), got \"a..b:80\"")
    expect.error(function()
      gw.upstream("r2", { scope = "rs", peers = { "192.0.2.1:80" }, resolve = {} })
    end, 'nres.ngx.upstream: resolve: expected nil (no peer is a DNS name), got "a table"')
    expect.error(function()
      gw.upstream("r3", { scope = "rs", peers = { "app.test:80" }, resolve = { min_ttl = -1 } })
    end, 'nres.ngx.upstream: resolve.min_ttl: expected seconds (a number 0..1e6, or with a unit:'
       .. ' "90s", "2m"), got -1')
  end)
end)
