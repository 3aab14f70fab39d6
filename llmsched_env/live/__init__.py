"""Live vLLM measurement: a server under an llmsched policy loaded by vLLM's own client, and its runs read back,
fitted and replayed in the simulator.

| module | what |
|---|---|
| ``server`` | ``vllm serve`` on 127.0.0.1 with the adapter, loaded by ``vllm bench serve`` (``-m`` command line) |
| ``records`` | the records of a run's files (steps, requests, the client's plan and result) and their checked readers |
| ``logs`` | ``load_run``: one run's files put together and matched, ``find_log_dir`` |
| ``fit`` | ``fit_live_cost_model``: a cost model of the server's own engine steps |
| ``sim`` | ``replay``: a run's request stream served again by the simulator under the same policy |
| ``compare`` | live (client and engine side) against simulated, metric by metric |
| ``replay`` | ``evaluate_runs``: all of it for several runs (``python -m llmsched_env.commands.live_replay``) |
| ``workloads`` | the live experiment's workloads and their block streams (a fixed tenant mix per block) |
| ``blocks`` | one block measured: client-side statistics, preemptions, sheds, fallbacks, the policy check |
| ``predict`` | what the simulator predicts for a block under an arm's policy |
| ``design`` | the block order (Williams), the rounds a predicted difference needs (power), paired differences |
| ``experiment`` | the live verdict's driver: one server per workload, calibration, predictions, paired rounds |
| ``verdict`` | the report: paired intervals, predictions against them, A/A, Kendall's tau, targets, plots |

It sits above ``evaluation`` (the judging of policies in simulation) and ``adapters`` (vLLM's scheduler with an
llmsched policy inside): it reads what the adapter logs and judges with the evaluation's tables. Nothing here
imports vLLM but ``server``'s client and launcher, run in the vLLM venv.
"""
