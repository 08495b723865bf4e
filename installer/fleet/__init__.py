"""``october_setup fleet``: one stack on every node of a Ray cluster, from one kit.

The fleet layer only schedules, ships and gathers; each node runs the ordinary single-node path
as subprocesses (``october_setup STACK --recipe R --kit KIT --locked``, then ``current smoke``):

- :mod:`.plan`   pure: which nodes, what each runs, the previous receipt's finished nodes, the verdict
  (frozen dataclasses, tested without Ray);
- :mod:`.node`   what runs on a node: receive a shipped kit (verified against its manifest), run
  the two commands through :class:`october.installer.core.runner.Runner`, report the facts;
- :mod:`.cluster` the thin Ray part (imported only by this command): find nodes, pin one task
  per node with hard node affinity, limit concurrency, time out, cancel on Ctrl-C, map a dead node
  to ``lost``.
- :mod:`.progress` what the user sees meanwhile: each node's phase (the steps its october_setup
  reports, then the smoke) and the counts done / ok / failed, as every long command shows progress.

Ray is an optional dependency (``pip install 'october[fleet]'``); nothing else imports it.
"""

from __future__ import annotations

FLEET_FORMAT = 1
NAME_LABEL = "october-node"          # a node's fleet name: this Ray label, else its hostname
