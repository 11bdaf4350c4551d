"""Research code: experiments and paper reproductions that check timeline, outside the installed package.

Tested (``tests/experiments``), linted and type-checked with the rest of the repository, but not
shipped: ``pyproject.toml`` installs ``timeline`` and ``cli`` only. Run them from the repository root.

- :mod:`experiments.netns_whatif`: DDP between two network namespaces over a ``tc``-limited link,
  checking ``timeline whatif``'s predictions against the measured slow run (``docs/whatif.md`` §9);
- :mod:`experiments.diagnosis_validation`: real 2-rank CPU DDP jobs with one injected cause each, run
  again with it removed, checking ``timeline analyze``'s findings against the measured gain
  (``docs/diagnosis.md``, Validation);
- :mod:`experiments.netns`: the two namespaces, the veth pair and the ``tc`` rate both use;
- :mod:`experiments.ranks`: joining the 2-rank gloo group and switching conditions between windows;
- :mod:`experiments.seed_simulator`: the seed paper's simulator on its released backward profiles
  (``docs/whatif.md`` §8).
"""
