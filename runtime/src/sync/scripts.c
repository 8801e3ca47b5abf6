/* SPDX-License-Identifier: MIT */
/* scripts.c - the server-side half of fleet sync: three Lua scripts that
 * Redis runs atomically, one per kind of state (nres/sync.h has the
 * semantics). They are loaded once per connection (SCRIPT LOAD) and called
 * by SHA (EVALSHA), each on one scope's keys (one hash tag, one Cluster
 * slot). Time is Redis's own (TIME), so hosts never compare their clocks;
 * the scripts write after TIME, which Redis 5+ replicates as effects.
 *
 * Constant cost per call: a budget's or a rate's record is a hash holding
 * the fleet figure, each host's last demand (d:<node>, in thousandths, an
 * integer so that running sums stay exact) and the running sum of the live
 * hosts' demands, beside a sorted set of the hosts scored by when they last
 * wrote. A call replaces its own demand in the sum, drops the hosts silent
 * for longer than `stale` (each leaves once: their demand leaves the sum),
 * and counts the hosts with ZCARD: O(log hosts), where reading every host
 * made a call O(hosts) and a scope's interval O(hosts^2). Both keys expire
 * `ttl` after the last write.
 */
#include "sync_int.h"

/* Shared prologue: this host's demand into the running sum, stale hosts
 * out (at most 64 a call; the rest at the next). A host that left has no
 * d: field any more, so its old demand reads 0 when it comes back. Leaves
 * now (us) and hosts(), which returns n (live hosts) and sum (their
 * demand). */
#define PROLOGUE                                                             \
  "local t = redis.call('TIME')\n"                                          \
  "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                 \
  "local function hosts(key, zkey, node, demand, stale)\n"                  \
  "  local r = redis.call('HMGET', key, 'sum', 'd:' .. node)\n"            \
  "  local sum, old = tonumber(r[1] or 0), tonumber(r[2] or 0)\n"           \
  "  local gone = redis.call('ZRANGEBYSCORE', zkey, '-inf', now - stale, 'LIMIT', 0, 64)\n" \
  "  for _, id in ipairs(gone) do\n"                                        \
  "    if id ~= node then\n"                                                \
  "      sum = sum - tonumber(redis.call('HGET', key, 'd:' .. id) or 0)\n"  \
  "      redis.call('HDEL', key, 'd:' .. id)\n"                             \
  "      redis.call('ZREM', zkey, id)\n"                                    \
  "    end\n"                                                               \
  "  end\n"                                                                 \
  "  local mine = math.floor(demand * 1000 + 0.5)\n"                        \
  "  redis.call('ZADD', zkey, now, node)\n"                                 \
  "  local n = redis.call('ZCARD', zkey)\n"                                 \
  "  sum = sum - old + mine\n"                                              \
  "  if n == 1 or sum < mine then sum = mine end\n"                         \
  "  redis.call('HSET', key, 'd:' .. node, mine, 'sum', sum)\n"             \
  "  return n, sum / 1000\n"                                                \
  "end\n"

/* KEYS[1] budget hash, KEYS[2] its hosts. ARGV: node, delta (micro-tokens:
 * deposits, floor credit and refunds less spends since the host's last
 * sync), demand (retries asked per s), capacity (micro-tokens), stale
 * (us), ttl (ms). The fleet's floor is the sum of the hosts' (each gets
 * its weight's part of it), so it arrives in the deltas. A new key starts
 * full; the level may fall to -capacity (a debt). Returns { share, level,
 * hosts, weight } (micro-tokens; weight, a string, is this host's part of
 * the shares). */
const char nres__sync_budget_lua[] =
  PROLOGUE
  "local key, zkey, node = KEYS[1], KEYS[2], ARGV[1]\n"
  "local delta, demand = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
  "local cap = tonumber(ARGV[4])\n"
  "local level = tonumber(redis.call('HGET', key, 'level') or cap)\n"
  "level = math.max(-cap, math.min(cap, level + delta))\n"
  "redis.call('HSET', key, 'level', string.format('%.0f', level))\n"
  "local n, sum = hosts(key, zkey, node, demand, tonumber(ARGV[5]))\n"
  "local w = (math.floor(demand * 1000 + 0.5) / 1000 + 1) / (sum + n)\n"
  "if w > 1 then w = 1 end\n"
  "local share = 0\n"
  "if level > 0 then share = math.floor(level * w) end\n"
  "redis.call('PEXPIRE', key, ARGV[6])\n"
  "redis.call('PEXPIRE', zkey, ARGV[6])\n"
  "return { share, level, n, string.format('%.6f', w) }\n";

/* KEYS[1] rate hash, KEYS[2] its hosts. ARGV: node, demand (per s), fleet
 * rate (per s), stale (us), ttl (ms). Returns { quota, sum, hosts, now_us },
 * quota and sum as strings (Redis would truncate numbers to integers). */
const char nres__sync_rate_lua[] =
  PROLOGUE
  "local key, zkey, node = KEYS[1], KEYS[2], ARGV[1]\n"
  "local demand, rate = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
  "local n, sum = hosts(key, zkey, node, demand, tonumber(ARGV[4]))\n"
  "demand = math.floor(demand * 1000 + 0.5) / 1000\n"
  "local quota\n"
  "if sum > rate then\n"
  "  quota = rate * demand / sum\n"
  "else\n"
  "  quota = demand + (rate - sum) / n\n"
  "end\n"
  "if quota > rate then quota = rate end\n"
  "redis.call('PEXPIRE', key, ARGV[5])\n"
  "redis.call('PEXPIRE', zkey, ARGV[5])\n"
  "return { string.format('%.6f', quota), string.format('%.6f', sum), n, now }\n";

/* KEYS[1] breaker hash: state ('open' | 'closed'), until (ms, Redis
 * clock), prober, beat (ms). KEYS[2], KEYS[3]: sorted sets of the voters
 * (hosts that saw the dependency lately) and of the open ones among them,
 * scored by when they last said so (ms), so a host that stops reporting
 * ages out in O(log hosts). KEYS[4]: the fleet's calls, a hash of each
 * voter's window (c:<node>, f:<node>: calls, failures) and their running
 * sums (calls, fails); a voter that ages out leaves the sums. ARGV: node,
 * local state ('closed', 'open', 'half', 'isolated'), own (1: the local
 * break is the host's own, not one given by the fleet), ms left of the
 * local break (own OPEN), stale (ms), keep (ms: how long a closed record
 * stays to be seen), lease (ms: a prober's claim lapses this long after its
 * break unless it opens again or closes), voter (1: calls in the host's
 * window, or own break), quorum (the fleet opens when more than this share
 * of the voters are open; 0: any), calls and failures in the host's
 * window, ratio (the fleet opens when at least this share of the fleet's
 * calls failed; 0: off), min calls (for the ratio).
 *
 * The fleet opens only on a quorum, of hosts or of calls: a host whose own
 * breaker opens below it protects itself and nobody else. A prober holds the fleet while it beats
 * and until its break ends plus the lease; a failed probe (a new break)
 * renews the claim, a host stuck half-open does not, and the host that
 * held a lapsed claim cannot take it again while half-open.
 * Returns { state, until_ms, me_prober, claim_live, now_ms, voters, open,
 * lapsed } (lapsed: the until of a claim found lapsed by its lease while
 * its prober still beats, else 0). */
const char nres__sync_breaker_lua[] =
  "local t = redis.call('TIME')\n"
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
  "local key, vk, ok, ck = KEYS[1], KEYS[2], KEYS[3], KEYS[4]\n"
  "local node, loc = ARGV[1], ARGV[2]\n"
  "local own, left = ARGV[3] == '1', tonumber(ARGV[4])\n"
  "local stale, keep, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])\n"
  "local voter, quorum = ARGV[8] == '1', tonumber(ARGV[9])\n"
  "local calls, fails = tonumber(ARGV[10]), tonumber(ARGV[11])\n"
  "local ratio, minc = tonumber(ARGV[12]), tonumber(ARGV[13])\n"
  "local broken = own and (loc == 'open' or loc == 'half')\n"
  "local c = redis.call('HMGET', ck, 'calls', 'fails', 'c:' .. node, 'f:' .. node)\n"
  "local sc = tonumber(c[1] or 0) - tonumber(c[3] or 0)\n"
  "local sf = tonumber(c[2] or 0) - tonumber(c[4] or 0)\n"
  "local gone = redis.call('ZRANGEBYSCORE', vk, '-inf', now - stale, 'LIMIT', 0, 64)\n"
  "for _, id in ipairs(gone) do\n"
  "  if id ~= node then\n"
  "    local g = redis.call('HMGET', ck, 'c:' .. id, 'f:' .. id)\n"
  "    sc, sf = sc - tonumber(g[1] or 0), sf - tonumber(g[2] or 0)\n"
  "    redis.call('HDEL', ck, 'c:' .. id, 'f:' .. id)\n"
  "    redis.call('ZREM', vk, id)\n"
  "  end\n"
  "end\n"
  "redis.call('ZREMRANGEBYSCORE', ok, '-inf', now - stale)\n"
  "if voter or broken then redis.call('ZADD', vk, now, node) else redis.call('ZREM', vk, node) end\n"
  "if broken then redis.call('ZADD', ok, now, node) else redis.call('ZREM', ok, node) end\n"
  "if not voter then calls, fails = 0, 0 end\n"
  "sc, sf = math.max(sc, 0) + calls, math.max(sf, 0) + fails\n"
  "if redis.call('ZCARD', vk) <= 1 then sc, sf = calls, fails end\n"
  "redis.call('HSET', ck, 'c:' .. node, calls, 'f:' .. node, fails, 'calls', sc, 'fails', sf)\n"
  "local voters, opened = redis.call('ZCARD', vk), redis.call('ZCARD', ok)\n"
  "local quorate = opened > 0 and (opened > quorum * voters or\n"
  "  (ratio > 0 and sc >= minc and sf >= ratio * sc))\n"
  "local r = redis.call('HMGET', key, 'state', 'until', 'prober', 'beat')\n"
  "local state, untl, prober, beat = r[1], tonumber(r[2] or 0), r[3], tonumber(r[4] or 0)\n"
  "local function held()\n"
  "  return state == 'open' and prober and (now - beat) <= stale and now <= untl + lease\n"
  "end\n"
  "local function claim(u)\n"
  "  state, untl, prober, beat = 'open', u, node, now\n"
  "  redis.call('HSET', key, 'state', 'open', 'until', untl, 'prober', node, 'beat', now)\n"
  "end\n"
  "local live = held()\n"
  "local lapsed = 0\n"
  "if state == 'open' and prober and not live and (now - beat) <= stale then lapsed = untl end\n"
  "if broken then\n"
  "  if loc == 'open' and ((prober == node and live) or (quorate and not live)) then\n"
  "    claim(now + left)\n"
  "  elseif loc == 'half' and prober == node and live then\n"
  "    beat = now\n"
  "    redis.call('HSET', key, 'beat', now)\n"
  "  elseif loc == 'half' and quorate and not live and prober ~= node then\n"
  "    claim(now)\n"
  "  end\n"
  "elseif loc == 'closed' and prober == node and state == 'open' then\n"
  "  state = 'closed'\n"
  "  redis.call('HSET', key, 'state', 'closed', 'beat', now)\n"
  "end\n"
  "live = held()\n"
  "local ttl = keep\n"
  "if state == 'open' then ttl = math.max(untl + lease - now, 0) + keep end\n"
  "if state == 'open' or (state == 'closed' and prober == node) then\n"
  "  redis.call('PEXPIRE', key, ttl)\n"
  "end\n"
  "redis.call('PEXPIRE', vk, keep)\n"
  "redis.call('PEXPIRE', ok, keep)\n"
  "redis.call('PEXPIRE', ck, keep)\n"
  "return { state or '', untl, prober == node and 1 or 0, live and 1 or 0, now, voters, opened, lapsed }\n";
