"""Where requests come from: arrival processes, length distributions, trace loaders, synthetic workloads,
scenarios with train/val/test splits, and the scenario library."""

# ruff: noqa: F401 (the package re-exports these names)

from llmsched_env.workloads.arrivals import ArrivalProcess, GammaArrivals, OnOff, Poisson, Ramp, TraceReplay
from llmsched_env.workloads.describe import describe_scenario
from llmsched_env.workloads.lengths import LengthDist, load_length_file
from llmsched_env.workloads.library import SCENARIOS, get_scenario, list_scenarios
from llmsched_env.workloads.scenarios import SPLITS, Scenario, scenario_from_trace
from llmsched_env.workloads.traces import TRACE_FORMATS, Trace, TraceError, load_trace
from llmsched_env.workloads.workload import TenantWorkload, WorkloadConfig, generate
