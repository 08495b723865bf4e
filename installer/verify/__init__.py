"""``current verify``: a finished stack read back against its lock, receipt and records without running it.

:mod:`.stack` walks the stack (forks, distributions, files, torch, wheel, JIT, lock, receipt, stack-env) and
reports each difference; :mod:`.outputs` the forks' build outputs, :mod:`.jit` the JIT libraries FlashInfer can
load, :mod:`.fix` the command that puts each difference back.  What it reads of the env (its distributions, the
bytecode Python would load, files no RECORD owns) is the env library's (:mod:`october.installer.pyenv`)."""
