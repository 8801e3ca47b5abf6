-- SPDX-License-Identifier: MIT
-- bench/tune-truth.lua - the tuner against a known dependency, for every
-- scenario of bench/tournament.lua (nresrun.tune.truth): a trace recorded
-- with no policy (seed 100), tuned on, and the tuned policy and every
-- preset run on the true scenario over seeds 1-10. Prints one line per
-- scenario: predicted (the replay on the model, seed 1) and true scores.
--
--   LUA_PATH='lua/?.lua;;' NRES_LIB=build/libnres.so luajit bench/tune-truth.lua [full|short] [PATTERN]
-- short (the default) is the test's (spec/lua/tune_spec.lua): each scenario
-- with 10 s of health before its first phase, its phases squeezed into 30 s,
-- and 20 s after the last.
local truth = require "nresrun.tune.truth"
local mode, only = arg[1] or "short", arg[2]
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
print("| scenario | best preset, predicted / true | tuned, predicted / true | tuned |")
print("|---|---|---|---|")
for _, sc in ipairs(dofile("bench/tournament.lua").spec.scenarios) do
  if not only or sc.name:find(only) then
    local t0 = os.clock()
    local s = mode == "full" and sc or truth.shorten(sc, 10, 20, 30)
    local c = truth.check(s, { dir = dir })
    local r = c.result
    local pred = {}
    for _, p in ipairs(r.presets) do pred[p.name] = p.score end
    local changes = {}
    for _, ch in ipairs(r.best.changes) do
      local v = ch.value
      if type(v) == "table" then v = "hedge at " .. v.at elseif v == false then v = "off" end
      changes[#changes + 1] = string.format("%s %s", ch.knob, tostring(v))
    end
    print(string.format("| %s | %s %.2f / %.2f | %s %.2f / %.2f | %s%s | %.0f s cpu", sc.name, c.best_name,
      pred[c.best_name], c.best, r.best.name, r.best.score, c.tuned,
      #changes > 0 and table.concat(changes, ", ") or "no change beyond 0.5 points",
      c.tuned >= c.best - 0.01 and "" or " **miss**", os.clock() - t0))
    io.stdout:flush()
  end
end
os.execute("rm -rf " .. dir)
