"""The planners' room, on top of the decision layer: what plays or forecasts the engine forward to choose
(``space``, ``lookahead``, ``bounds``, ``mpc``, ``tuned``; docs/evaluation.md). Within ``decision/`` only
``policy_spec`` imports them; they import no gymnasium (an env reaches them as an object).
"""
