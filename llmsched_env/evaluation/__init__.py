"""Judging schedulers: episodes, grids over policies, scenarios, loads and seeds, capacity search,
statistics over seeds, result files, plots and scale-out on Ray."""
