"""(2) Verifiers: completion text + gold answer -> reward, deterministic.

This file imports nothing, so importing one verifier never loads the others. Where things are:

* :mod:`rlvr.verifiers.registry`: the names a config uses (``VERIFIERS``, ``get_verifier``) and
  ``@register`` for your own;
* :mod:`rlvr.verifiers.contract`: how a name or an import path becomes a function, and how it is
  called (per item or TRL-batched), for every caller;
* :mod:`rlvr.verifiers.pool`: many items scored in worker processes with hard timeouts;
* the verifiers themselves: :mod:`rlvr.verifiers.math` (``boxed_math``),
  :mod:`rlvr.verifiers.code` (``python_code``: sandboxed tests), :mod:`rlvr.verifiers.format`
  (``think_format``, ``mode_format``), :mod:`rlvr.verifiers.conciseness` (``brevity``),
  :mod:`rlvr.verifiers.gym` (``reasoning_gym``), :mod:`rlvr.verifiers.worked_steps`
  (``worked_steps``: a process reward on written arithmetic).

docs/verifiers.md describes each one.
"""
