"""Rollouts that judge themselves: what one is asked to do (``spec``), one measurement of
the new version against the stable one from the fleet's tallies (``analysis``), a rollout's
life as pure moves (``progress``), where rollouts are kept (``store``), each move announced
(``events``), and the service that starts, reads, promotes, aborts and advances them
(``service``).

Imports ``catalog`` (the weighted labels, the tallies, the table), ``metrics`` (a tally) and
``errors``; moves labels through the management API's checks (``service.LabelMover``).
"""
