-- SPDX-License-Identifier: MIT
-- nres.ngx.elected: the timers of a job that one worker runs for the whole
-- nginx on behalf of an upstream (active health checks, resolving peers'
-- names). Every worker runs the timer; the job's own lease word in shared
-- memory says which one works (nres_gw_lease_take). Here: starting the
-- timers in init_worker and re-arming them, a failure logged once each.
local _M = {}

-- tick(premature, u) again after `wait` seconds; `what` names the job in
-- the log ("health checks").
function _M.again(wait, tick, u, what)
  local ok, err = ngx.timer.at(wait, tick, u)
  if not ok and err ~= "process exiting" then
    ngx.log(ngx.ERR, "nres: ", what, " of ", u.name, ": ngx.timer.at: ", err)
  end
end

-- A timer at once for each balancer upstream whose field `has` is set.
function _M.start(upstreams, has, tick, what)
  for _, u in pairs(upstreams) do
    if u.balancer and u[has] then
      local ok, err = ngx.timer.at(0, tick, u)
      if not ok then ngx.log(ngx.ERR, "nres: ", what, " of ", u.name, ": ", err) end
    end
  end
end

return _M
