"""The command line: :mod:`.main` the ``october_setup`` app (``STACK``, ``kit``, ``fleet``) and the entry points,
:mod:`.current` the ``current`` app, :mod:`.common` what they share, :mod:`.noop` the fast path that answers a
no-op re-run without the command-line framework, :mod:`.provision` what ``october_setup STACK`` does with its
options, :mod:`.envreport` ``current env``'s report.  Both console scripts enter through
:mod:`october.installer.october_setup`.  Nothing is imported here: the fast path imports :mod:`.noop` alone."""
