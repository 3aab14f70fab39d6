"""Cost models: how long one engine iteration takes. The ``CostModel`` protocol, the roofline
``AnalyticCostModel``, the fitted ``LinearCostModel``, and the presets under ``presets/``. Stdlib and numpy.
"""

from llmsched_env.costs.analytic import AnalyticCostModel
from llmsched_env.costs.base import CostModel, prefill_time_s, unloaded_decode_time_s
from llmsched_env.costs.linear import LinearCostModel, fit_report
from llmsched_env.costs.loader import list_presets, load_cost_model

__all__ = ["AnalyticCostModel", "CostModel", "LinearCostModel", "fit_report", "list_presets", "load_cost_model",
           "prefill_time_s", "unloaded_decode_time_s"]
