"""The planners' room, on top of the decision layer: what plays or forecasts the engine forward to choose.

| module | what |
|---|---|
| ``space`` | static knob settings (``neighbours``, ``random_candidates``, ``base_decision``), per-request moves |
| ``lookahead`` | ``LookaheadConfig``, ``parse_lookahead``, ``BOUND_MARK``: the clairvoyant bound's options |
| ``bounds`` | ``LookaheadPolicy``, ``RouteLookaheadPolicy``: the bounds, played forward on env snapshots |
| ``mpc`` | ``MPCPlanner``, ``MPCPolicy``, ``mpc_for``, ``mpc_on_env``: planning on forecast futures (deployable) |
| ``tuned`` | the tuned-settings table, ``shipped_table``, ``user_table`` and the keys of a user's traces |

Within ``decision/`` only ``policy_spec`` imports them (to spell and build ``lookahead``, ``mpc`` and ``tuned``);
they import no gymnasium (an env reaches them as an object). The ``tuned`` search is ``evaluation.tuning``.
"""
