-- SPDX-License-Identifier: MIT
-- bench/overhead.lua - the five executor benchmarks of the second
-- reference (../shared/reference/001_*.txt): handing work to background
-- threads, chains, logging, parallel fan-out, file manipulation.
--
--   build/nresrun bench/overhead.lua           full run, ~2 minutes
--   build/nresrun bench/overhead.lua --quick   ~40 seconds
--
-- The work is C (bench/c/bench_pool.c, on the nres work pool); this file
-- only declares the run. Reports: the reference's table format, as
-- Markdown and JSON, under artifacts/stress/ (or --out).
local nresrun = require "nresrun"

return nresrun.external{
  name = "overhead",
  program = "bench_pool",
  args = { "--only", "minimal,sequential,logging,parallel,files" },
  quick_args = { "--quick" },
  timeout = 900,
}
