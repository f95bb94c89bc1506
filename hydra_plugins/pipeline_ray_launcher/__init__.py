"""``hydra/launcher=ray``: each job of a Hydra sweep as a Ray task, on a local Ray or a cluster.

This project's own launcher plugin on Ray's public API (``ray.init``, ``ray.remote``,
``ray.get``, ``ray.cancel``), not Hydra's ``hydra-ray-launcher``: that one requires
``cloudpickle<3``, while joblib (of ``hydra-joblib-launcher``, a core dependency) requires
``cloudpickle>=3``. ``config`` registers ``hydra/launcher=ray``; ``ray_launcher`` runs the jobs.
"""
