"""Studies on the cluster, as Soma's ``Study``: a search space, a sampler and a pruner.

``space`` reads Soma's dimensions, ``record`` keeps the study as JSON after
every trial, ``sampling`` puts Optuna's samplers and pruners behind it,
``driver`` runs the trials on the workers, ``api`` is ``submit_study``.
"""
