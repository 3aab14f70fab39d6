"""The engine-state core: requests, the paged KV block pool, the batch builder, cost models, workloads, the
simulator and metrics. Stdlib and numpy only, so the simulator and the torch runtime share it unchanged."""
