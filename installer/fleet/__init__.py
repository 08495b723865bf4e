"""``october_setup fleet``: one stack on every node of a Ray cluster, from one kit.  The fleet only schedules,
ships and gathers; each node runs the single-node commands (``october_setup ... --kit KIT --locked``, then
``current smoke``).  :mod:`.plan` is pure (nodes, jobs, resume, verdict), :mod:`.node` runs on a node,
:mod:`.cluster` is the thin Ray part, :mod:`.progress` what the user sees.  Ray is optional
(``pip install 'october[fleet]'``); only :mod:`.cluster` imports it.
"""

from __future__ import annotations

FLEET_FORMAT = 1
NAME_LABEL = "october-node"          # a node's fleet name: this Ray label, else its hostname
