"""Running plans, in layers named for where a run is in its life.

Each layer imports only the layers above it in this list (a test checks it):

``compile``   a plan and its placement become a program: blocks, values, control rules
``state``     what a run remembers, in Redis (atomic Lua scripts) or in memory; history
``engine``    what happens next when a block starts or ends; publishing blocks, transfers
``recovery``  runs survive dead workers and lost messages: reaper, election, recompute
``worker``    the node task and the body that runs a block's nodes on a worker
``producer``  ``submit_plan``, the ``PlanRun`` handle, outputs, in-process runs, states
"""
